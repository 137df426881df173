package collate

import (
	"github.com/trajflow/trajflow/schema"
	"slices"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
)

// maxReserve bounds the text a Collator reserves for its next batch.
const maxReserve = 16 << 20

// DefaultBatchRows is the batch size New uses when given batchRows <= 0.
const DefaultBatchRows = 1024

// Collator buffers rollouts into Arrow builders and cuts record batches
// between groups. It is not safe for concurrent use.
type Collator struct {
	batchRows int
	rows      int
	// bytes is the buffered rows' text (RowBytes); a record is handed out
	// at batchBytes and never holds more than maxBytes (SetBytes).
	bytes, batchBytes, maxBytes int64
	b                           *array.RecordBuilder

	str  [schema.NumColumns]*array.StringBuilder
	i64  [schema.NumColumns]*array.Int64Builder
	i32  [schema.NumColumns]*array.Int32Builder
	f64  [schema.NumColumns]*array.Float64Builder
	bool [schema.NumColumns]*array.BooleanBuilder

	turnRewards     *array.ListBuilder
	turnRewardsVals *array.Float64Builder

	turnGen     *array.ListBuilder
	turnGenVals *array.Int32Builder
	turnGenBuf  []int32

	metrics      *array.ListBuilder
	metricStruct *array.StructBuilder
	metricName   *array.StringBuilder
	metricValue  *array.Float64Builder

	msgs        *array.ListBuilder
	msg         *array.StructBuilder
	msgRole     *array.StringBuilder
	msgContent  *array.StringBuilder
	msgTools    *array.ListBuilder
	tool        *array.StructBuilder
	toolID      *array.StringBuilder
	toolType    *array.StringBuilder
	toolName    *array.StringBuilder
	toolArgs    *array.StringBuilder
	msgToolCID  *array.StringBuilder
	msgName     *array.StringBuilder
	msgTokStart *array.Int32Builder
	msgTokEnd   *array.Int32Builder
	msgTurn     *array.Int32Builder
	msgParts    *array.ListBuilder
	part        *array.StructBuilder
	partType    *array.StringBuilder
	partText    *array.StringBuilder
	partURL     *array.StringBuilder

	spans          *array.ListBuilder
	span           *array.StructBuilder
	spanVersion    *array.Int64Builder
	spanVersionMax *array.Int64Builder
	spanStart      *array.Int32Builder
	spanEnd        *array.Int32Builder

	segs       *array.ListBuilder
	seg        *array.StructBuilder
	segMessage *array.Int32Builder
	segToken   *array.Int32Builder
	segTurn    *array.Int32Builder

	routes    *array.ListBuilder
	routeVals *array.Int16Builder

	promptIDs, respIDs, lossMask, respLP *array.ListBuilder
	promptIDVals, respIDVals             *array.Int32Builder
	lossMaskVals                         *array.Int8Builder
	respLPVals                           *array.Float32Builder

	metricKeys []string

	// The scalar columns are staged in Go slices, reused from batch to
	// batch, and appended to their builders in bulk when a record is cut:
	// one reservation and one validity-bitmap fill per column and batch
	// instead of one per value.
	stage stage
}

// stage holds the buffered rows' values of the scalar columns, by column,
// the list offsets of the list columns, and the fields of the messages and
// metrics. Offsets into a staged child (messages, metrics) count its staged
// elements; offsets into a child built directly are its builder's length.
type stage struct {
	str  [schema.NumColumns][]string
	i64  [schema.NumColumns][]int64
	i32  [schema.NumColumns][]int32
	f64  [schema.NumColumns][]float64
	bool [schema.NumColumns][]bool
	task [][]byte
	// list holds the row-level list columns' start offsets.
	list [schema.NumColumns][]int32

	msgRole, msgContent, msgToolCID, msgName []string
	msgTurn, msgTokStart, msgTokEnd          []int32
	msgTools                                 []int32
	msgParts                                 []int32

	metricName  []string
	metricValue []float64

	// routesValid is the validity of each staged routed_experts value
	// (null: no routes).
	routesValid []bool

	trues []bool
}

// valid returns n trues (validity for n values).
func (s *stage) valid(n int) []bool {
	for len(s.trues) < n {
		s.trues = append(s.trues, true)
	}
	return s.trues[:n]
}

// New returns a Collator that allocates from alloc and hands out records of
// at least batchRows rows, or DefaultBatchBytes of text (the last one may be
// smaller; see Flush and SetBytes).
func New(alloc memory.Allocator, batchRows int) *Collator {
	if alloc == nil {
		alloc = memory.DefaultAllocator
	}
	if batchRows <= 0 {
		batchRows = DefaultBatchRows
	}
	c := &Collator{batchRows: batchRows, batchBytes: DefaultBatchBytes, maxBytes: MaxRecordBytes, b: array.NewRecordBuilder(alloc, schema.Schema())}
	for i, f := range schema.Schema().Fields() {
		fb := c.b.Field(i)
		switch f.Type.ID() {
		case arrow.STRING:
			c.str[i] = fb.(*array.StringBuilder)
		case arrow.INT64:
			c.i64[i] = fb.(*array.Int64Builder)
		case arrow.INT32:
			c.i32[i] = fb.(*array.Int32Builder)
		case arrow.FLOAT64:
			c.f64[i] = fb.(*array.Float64Builder)
		case arrow.BOOL:
			c.bool[i] = fb.(*array.BooleanBuilder)
		}
	}
	c.turnRewards = c.b.Field(schema.ColTurnRewards).(*array.ListBuilder)
	c.turnRewardsVals = c.turnRewards.ValueBuilder().(*array.Float64Builder)
	c.turnGen = c.b.Field(schema.ColTurnGenTokens).(*array.ListBuilder)
	c.turnGenVals = c.turnGen.ValueBuilder().(*array.Int32Builder)

	c.metrics = c.b.Field(schema.ColMetrics).(*array.ListBuilder)
	c.metricStruct = c.metrics.ValueBuilder().(*array.StructBuilder)
	c.metricName = c.metricStruct.FieldBuilder(schema.MetricName).(*array.StringBuilder)
	c.metricValue = c.metricStruct.FieldBuilder(schema.MetricValue).(*array.Float64Builder)

	c.msgs = c.b.Field(schema.ColMessages).(*array.ListBuilder)
	c.msg = c.msgs.ValueBuilder().(*array.StructBuilder)
	c.msgRole = c.msg.FieldBuilder(schema.MsgRole).(*array.StringBuilder)
	c.msgContent = c.msg.FieldBuilder(schema.MsgContent).(*array.StringBuilder)
	c.msgTools = c.msg.FieldBuilder(schema.MsgToolCalls).(*array.ListBuilder)
	c.tool = c.msgTools.ValueBuilder().(*array.StructBuilder)
	c.toolID = c.tool.FieldBuilder(schema.ToolID).(*array.StringBuilder)
	c.toolType = c.tool.FieldBuilder(schema.ToolType).(*array.StringBuilder)
	c.toolName = c.tool.FieldBuilder(schema.ToolName).(*array.StringBuilder)
	c.toolArgs = c.tool.FieldBuilder(schema.ToolArguments).(*array.StringBuilder)
	c.msgToolCID = c.msg.FieldBuilder(schema.MsgToolCallID).(*array.StringBuilder)
	c.msgName = c.msg.FieldBuilder(schema.MsgName).(*array.StringBuilder)
	c.msgTokStart = c.msg.FieldBuilder(schema.MsgTokenStart).(*array.Int32Builder)
	c.msgTokEnd = c.msg.FieldBuilder(schema.MsgTokenEnd).(*array.Int32Builder)
	c.msgTurn = c.msg.FieldBuilder(schema.MsgTurn).(*array.Int32Builder)
	c.msgParts = c.msg.FieldBuilder(schema.MsgParts).(*array.ListBuilder)
	c.part = c.msgParts.ValueBuilder().(*array.StructBuilder)
	c.partType = c.part.FieldBuilder(schema.PartType).(*array.StringBuilder)
	c.partText = c.part.FieldBuilder(schema.PartText).(*array.StringBuilder)
	c.partURL = c.part.FieldBuilder(schema.PartImageURL).(*array.StringBuilder)

	c.promptIDs = c.b.Field(schema.ColPromptTokenIDs).(*array.ListBuilder)
	c.respIDs = c.b.Field(schema.ColResponseTokenIDs).(*array.ListBuilder)
	c.lossMask = c.b.Field(schema.ColLossMask).(*array.ListBuilder)
	c.respLP = c.b.Field(schema.ColResponseLogprobs).(*array.ListBuilder)
	c.promptIDVals = c.promptIDs.ValueBuilder().(*array.Int32Builder)
	c.respIDVals = c.respIDs.ValueBuilder().(*array.Int32Builder)
	c.lossMaskVals = c.lossMask.ValueBuilder().(*array.Int8Builder)
	c.respLPVals = c.respLP.ValueBuilder().(*array.Float32Builder)

	c.spans = c.b.Field(schema.ColPolicyVersions).(*array.ListBuilder)
	c.span = c.spans.ValueBuilder().(*array.StructBuilder)
	c.spanVersion = c.span.FieldBuilder(schema.SpanVersion).(*array.Int64Builder)
	c.spanVersionMax = c.span.FieldBuilder(schema.SpanVersionMax).(*array.Int64Builder)
	c.spanStart = c.span.FieldBuilder(schema.SpanStart).(*array.Int32Builder)
	c.spanEnd = c.span.FieldBuilder(schema.SpanEnd).(*array.Int32Builder)

	c.segs = c.b.Field(schema.ColSegments).(*array.ListBuilder)
	c.seg = c.segs.ValueBuilder().(*array.StructBuilder)
	c.segMessage = c.seg.FieldBuilder(schema.SegmentMessage).(*array.Int32Builder)
	c.segToken = c.seg.FieldBuilder(schema.SegmentToken).(*array.Int32Builder)
	c.segTurn = c.seg.FieldBuilder(schema.SegmentTurn).(*array.Int32Builder)

	c.routes = c.b.Field(schema.ColRoutedExperts).(*array.ListBuilder)
	c.routeVals = c.routes.ValueBuilder().(*array.Int16Builder)
	return c
}

// Rows returns the number of rows buffered and not yet handed out.
func (c *Collator) Rows() int { return c.rows }

// Add appends one row per rollout of g. It returns a record holding every
// buffered row once at least batchRows rows are buffered, else nil. A
// group is never split across records. The caller must Release the record.
func (c *Collator) Add(g *pipeline.Group) arrow.Record {
	if g != nil {
		for _, r := range g.Rollouts {
			if r != nil {
				c.appendRollout(r)
			}
		}
	}
	if c.rows >= c.batchRows || c.bytes >= c.batchBytes {
		return c.Flush()
	}
	return nil
}

// Flush returns a record holding every buffered row, or nil when none is
// buffered. The caller must Release the record.
func (c *Collator) Flush() arrow.Record {
	if c.rows == 0 {
		return nil
	}
	rows := c.rows
	c.rows, c.bytes = 0, 0
	c.unstage()
	// Size the next batch's largest buffers like this one's, so that they
	// are allocated once rather than grown by doubling and copying.
	content, task := c.msgContent.DataLen(), c.str[schema.ColTask].DataLen()
	vals := make([]int, len(c.reserve()))
	for i, b := range c.reserve() {
		vals[i] = b.Len()
	}
	rec := c.b.NewRecord()
	c.b.Reserve(rows)
	// At most maxReserve: one batch of long completions must not keep
	// its size reserved for every batch after it.
	c.msgContent.ReserveData(min(content, maxReserve))
	c.str[schema.ColTask].ReserveData(min(task, maxReserve))
	for i, b := range c.reserve() {
		b.Reserve(vals[i])
	}
	return rec
}

// unstageCol appends the staged values v to b (only when there are any:
// b is nil for columns of another type) and returns v emptied, without
// references to what it held.
func unstageCol[T any, B interface{ AppendValues([]T, []bool) }](b B, v []T) []T {
	if len(v) > 0 {
		b.AppendValues(v, nil)
		clear(v)
	}
	return v[:0]
}

// unstage appends the staged scalar values to their builders and empties
// the stage (dropping its references to the rollouts' strings).
func (c *Collator) unstage() {
	s := &c.stage
	for i := range schema.NumColumns {
		s.str[i] = unstageCol(c.str[i], s.str[i])
		s.i64[i] = unstageCol(c.i64[i], s.i64[i])
		s.i32[i] = unstageCol(c.i32[i], s.i32[i])
		s.f64[i] = unstageCol(c.f64[i], s.f64[i])
		s.bool[i] = unstageCol(c.bool[i], s.bool[i])
	}
	if len(s.task) > 0 {
		c.str[schema.ColTask].BinaryBuilder.AppendValues(s.task, nil)
		clear(s.task)
		s.task = s.task[:0]
	}
	for i, lb := range []*array.ListBuilder{
		schema.ColTurnRewards: c.turnRewards, schema.ColTurnGenTokens: c.turnGen, schema.ColMetrics: c.metrics, schema.ColMessages: c.msgs,
		schema.ColPromptTokenIDs: c.promptIDs, schema.ColResponseTokenIDs: c.respIDs, schema.ColLossMask: c.lossMask, schema.ColResponseLogprobs: c.respLP,
		schema.ColPolicyVersions: c.spans, schema.ColSegments: c.segs,
	} {
		if v := s.list[i]; lb != nil && len(v) > 0 {
			lb.AppendValues(v, s.valid(len(v)))
			s.list[i] = v[:0]
		}
	}
	if v := s.list[schema.ColRoutedExperts]; len(v) > 0 {
		c.routes.AppendValues(v, s.routesValid)
		s.list[schema.ColRoutedExperts], s.routesValid = v[:0], s.routesValid[:0]
	}
	if n := len(s.metricName); n > 0 {
		c.metricStruct.AppendValues(s.valid(n))
		c.metricName.AppendValues(s.metricName, nil)
		c.metricValue.AppendValues(s.metricValue, nil)
		clear(s.metricName)
		s.metricName, s.metricValue = s.metricName[:0], s.metricValue[:0]
	}
	if n := len(s.msgTurn); n > 0 {
		c.msg.AppendValues(s.valid(n))
		for _, f := range []struct {
			b *array.StringBuilder
			v *[]string
		}{{c.msgRole, &s.msgRole}, {c.msgContent, &s.msgContent}, {c.msgToolCID, &s.msgToolCID}, {c.msgName, &s.msgName}} {
			f.b.AppendValues(*f.v, nil)
			clear(*f.v)
			*f.v = (*f.v)[:0]
		}
		c.msgTurn.AppendValues(s.msgTurn, nil)
		c.msgTokStart.AppendValues(s.msgTokStart, nil)
		c.msgTokEnd.AppendValues(s.msgTokEnd, nil)
		c.msgTools.AppendValues(s.msgTools, s.valid(n))
		c.msgParts.AppendValues(s.msgParts, s.valid(n))
		s.msgTurn, s.msgTokStart, s.msgTokEnd, s.msgTools, s.msgParts = s.msgTurn[:0], s.msgTokStart[:0], s.msgTokEnd[:0], s.msgTools[:0], s.msgParts[:0]
	}
}

// reserve lists the value builders worth pre-sizing after a flush.
func (c *Collator) reserve() []array.Builder {
	return []array.Builder{c.msg,
		c.promptIDs.ValueBuilder(), c.respIDs.ValueBuilder(), c.lossMask.ValueBuilder(), c.respLP.ValueBuilder()}
}

// Release frees the builders and any rows still buffered.
func (c *Collator) Release() {
	if c.b != nil {
		c.b.Release()
		c.b = nil
	}
	c.rows, c.bytes = 0, 0
	c.stage = stage{}
}

// SeqTokens returns NeMo RL's per-sample token counts of r's training
// view, the prompt left out: gen, the response tokens the model generated
// in exactly this context (loss mask 1), and total, every response token
// (len(ResponseTokenIDs)). total - gen are the response tokens with loss
// mask 0: observation tokens, chat-template tokens around observations
// included. Collate writes them as gen_tokens, total_tokens and
// env_tokens.
func SeqTokens(r *pipeline.Rollout) (gen, total int) {
	for _, m := range r.LossMask {
		if m != 0 {
			gen++
		}
	}
	return gen, len(r.ResponseTokenIDs)
}

// validUTF8 is what a string column holds of s (schema.ValidUTF8).
func validUTF8(s string) string { return schema.ValidUTF8(s) }

// validUTF8Bytes is validUTF8 for a byte slice.
func validUTF8Bytes(b []byte) []byte { return schema.ValidUTF8Bytes(b) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (c *Collator) appendRollout(r *pipeline.Rollout) {
	c.rows++
	c.bytes += RowBytes(r)
	var taskIndex int64
	var raw []byte
	if r.Task != nil {
		taskIndex = r.Task.Index
		raw = r.Task.Raw
	}
	st := &c.stage
	st.str[schema.ColRunID] = append(st.str[schema.ColRunID], validUTF8(r.RunID))
	st.i64[schema.ColTaskIndex] = append(st.i64[schema.ColTaskIndex], taskIndex)
	st.i32[schema.ColAttempt] = append(st.i32[schema.ColAttempt], int32(r.Attempt))
	st.i32[schema.ColRolloutIndex] = append(st.i32[schema.ColRolloutIndex], int32(r.RolloutIndex))
	st.str[schema.ColGroupID] = append(st.str[schema.ColGroupID], validUTF8(r.GroupID))
	st.str[schema.ColTrajID] = append(st.str[schema.ColTrajID], validUTF8(r.TrajID))
	st.i64[schema.ColSeed] = append(st.i64[schema.ColSeed], r.Seed)
	st.i32[schema.ColGroupSize] = append(st.i32[schema.ColGroupSize], int32(r.GroupSize))
	st.str[schema.ColEnv] = append(st.str[schema.ColEnv], validUTF8(r.Env))
	st.str[schema.ColModel] = append(st.str[schema.ColModel], validUTF8(r.Model))
	st.str[schema.ColStatus] = append(st.str[schema.ColStatus], validUTF8(string(r.Status)))
	st.str[schema.ColErrorClass] = append(st.str[schema.ColErrorClass], validUTF8(r.ErrorClass))
	st.f64[schema.ColReward] = append(st.f64[schema.ColReward], r.Reward)

	st.list[schema.ColTurnRewards] = append(st.list[schema.ColTurnRewards], int32(c.turnRewardsVals.Len()))
	c.turnRewardsVals.AppendValues(r.TurnRewards, nil)

	st.list[schema.ColMetrics] = append(st.list[schema.ColMetrics], int32(len(st.metricName)))
	if len(r.Metrics) > 0 {
		c.metricKeys = c.metricKeys[:0]
		for k := range r.Metrics {
			c.metricKeys = append(c.metricKeys, k)
		}
		slices.Sort(c.metricKeys)
		for _, k := range c.metricKeys {
			st.metricName = append(st.metricName, validUTF8(k))
			st.metricValue = append(st.metricValue, r.Metrics[k])
		}
	}

	st.str[schema.ColFinishReason] = append(st.str[schema.ColFinishReason], validUTF8(r.FinishReason))
	st.bool[schema.ColTerminated] = append(st.bool[schema.ColTerminated], r.Terminated)
	st.bool[schema.ColTruncated] = append(st.bool[schema.ColTruncated], r.Truncated)
	st.bool[schema.ColMaxTurnsReached] = append(st.bool[schema.ColMaxTurnsReached], r.MaxTurnsReached)
	st.i32[schema.ColNumTurns] = append(st.i32[schema.ColNumTurns], int32(r.NumTurns))
	st.i32[schema.ColTokenContinuityBreaks] = append(st.i32[schema.ColTokenContinuityBreaks], int32(r.TokenContinuityBreaks))
	st.i32[schema.ColToolCalls] = append(st.i32[schema.ColToolCalls], int32(r.ToolCalls))
	st.i32[schema.ColRetries] = append(st.i32[schema.ColRetries], int32(r.Retries))
	st.i32[schema.ColPromptTokensDropped] = append(st.i32[schema.ColPromptTokensDropped], int32(r.PromptTokensDropped))
	st.i32[schema.ColInvalidActions] = append(st.i32[schema.ColInvalidActions], int32(r.InvalidActions))
	st.i64[schema.ColAdmittedVersion] = append(st.i64[schema.ColAdmittedVersion], r.AdmittedVersion)
	st.i64[schema.ColMinPolicyVersion] = append(st.i64[schema.ColMinPolicyVersion], r.MinPolicyVersion())
	// The nullable sampling columns go to their builders at once (the
	// stage holds no validity).
	appendNullable(c.f64[schema.ColTemperature], r.Sampling.Temperature)
	appendNullable(c.f64[schema.ColTopP], r.Sampling.TopP)
	appendNullable(c.i32[schema.ColTopK], r.Sampling.TopK)
	appendNullable(c.i32[schema.ColMaxTokens], r.Sampling.MaxTokens)
	st.f64[schema.ColGroupRewardMean] = append(st.f64[schema.ColGroupRewardMean], r.GroupRewardMean)
	st.f64[schema.ColGroupRewardStd] = append(st.f64[schema.ColGroupRewardStd], r.GroupRewardStd)
	st.f64[schema.ColAdvantage] = append(st.f64[schema.ColAdvantage], r.Advantage)
	st.bool[schema.ColKept] = append(st.bool[schema.ColKept], r.Kept)
	st.str[schema.ColFilterReason] = append(st.str[schema.ColFilterReason], validUTF8(r.FilterReason))
	st.i64[schema.ColPromptTokens] = append(st.i64[schema.ColPromptTokens], int64(r.PromptTokens))
	st.i64[schema.ColCompletionTokens] = append(st.i64[schema.ColCompletionTokens], int64(r.CompletionTokens))
	// The training view's counts, nullable (to their builders at once):
	// null where a reply came without token ids, never a 0 that looks
	// like a count; turn_gen_tokens is then empty.
	st.list[schema.ColTurnGenTokens] = append(st.list[schema.ColTurnGenTokens], int32(c.turnGenVals.Len()))
	if r.SeqCountsKnown() {
		gen, total := SeqTokens(r)
		c.i64[schema.ColEnvTokens].Append(int64(total - gen))
		c.i64[schema.ColGenTokens].Append(int64(gen))
		c.i64[schema.ColTotalTokens].Append(int64(total))
		c.turnGenBuf = r.TurnGenTokens(c.turnGenBuf)
		c.turnGenVals.AppendValues(c.turnGenBuf, nil)
	} else {
		c.i64[schema.ColEnvTokens].AppendNull()
		c.i64[schema.ColGenTokens].AppendNull()
		c.i64[schema.ColTotalTokens].AppendNull()
	}
	st.f64[schema.ColGenMS] = append(st.f64[schema.ColGenMS], ms(r.GenTime))
	st.f64[schema.ColEnvMS] = append(st.f64[schema.ColEnvMS], ms(r.EnvTime))
	st.f64[schema.ColTotalMS] = append(st.f64[schema.ColTotalMS], ms(r.TotalTime))
	st.str[schema.ColError] = append(st.str[schema.ColError], validUTF8(r.Error))
	st.task = append(st.task, validUTF8Bytes(raw))

	st.list[schema.ColMessages] = append(st.list[schema.ColMessages], int32(len(st.msgTurn)))
	for i := range r.Messages {
		m := &r.Messages[i]
		st.msgRole = append(st.msgRole, validUTF8(m.Role))
		st.msgContent = append(st.msgContent, validUTF8(m.Content))
		st.msgTools = append(st.msgTools, int32(c.tool.Len()))
		for _, tc := range m.ToolCalls {
			c.tool.Append(true)
			c.toolID.Append(validUTF8(tc.ID))
			c.toolType.Append(validUTF8(tc.Type))
			c.toolName.Append(validUTF8(tc.Name))
			c.toolArgs.Append(validUTF8(tc.Arguments))
		}
		st.msgParts = append(st.msgParts, int32(c.part.Len()))
		for _, p := range m.Parts {
			c.part.Append(true)
			c.partType.Append(validUTF8(p.Type))
			c.partText.Append(validUTF8(p.Text))
			c.partURL.Append(validUTF8(p.ImageURL))
		}
		st.msgToolCID = append(st.msgToolCID, validUTF8(m.ToolCallID))
		st.msgName = append(st.msgName, validUTF8(m.Name))
		st.msgTokStart = append(st.msgTokStart, m.TokenStart)
		st.msgTokEnd = append(st.msgTokEnd, m.TokenEnd)
		st.msgTurn = append(st.msgTurn, int32(m.Turn))
	}

	st.list[schema.ColPromptTokenIDs] = append(st.list[schema.ColPromptTokenIDs], int32(c.promptIDVals.Len()))
	c.promptIDVals.AppendValues(r.PromptTokenIDs, nil)
	st.list[schema.ColResponseTokenIDs] = append(st.list[schema.ColResponseTokenIDs], int32(c.respIDVals.Len()))
	c.respIDVals.AppendValues(r.ResponseTokenIDs, nil)
	st.list[schema.ColLossMask] = append(st.list[schema.ColLossMask], int32(c.lossMaskVals.Len()))
	c.lossMaskVals.AppendValues(r.LossMask, nil)
	st.list[schema.ColResponseLogprobs] = append(st.list[schema.ColResponseLogprobs], int32(c.respLPVals.Len()))
	c.respLPVals.AppendValues(r.ResponseLogprobs, nil)

	st.list[schema.ColPolicyVersions] = append(st.list[schema.ColPolicyVersions], int32(c.span.Len()))
	for _, sp := range r.PolicyVersions {
		c.span.Append(true)
		c.spanVersion.Append(sp.Version)
		c.spanVersionMax.Append(sp.VersionMax)
		c.spanStart.Append(sp.Start)
		c.spanEnd.Append(sp.End)
	}

	st.list[schema.ColSegments] = append(st.list[schema.ColSegments], int32(c.seg.Len()))
	for _, sg := range r.Segments {
		c.seg.Append(true)
		c.segMessage.Append(sg.Message)
		c.segToken.Append(sg.Token)
		c.segTurn.Append(sg.Turn)
	}

	// routed_experts: null without routes (schema.EncodeRoutes).
	st.list[schema.ColRoutedExperts] = append(st.list[schema.ColRoutedExperts], int32(c.routeVals.Len()))
	st.routesValid = append(st.routesValid, r.Routes != nil)
	if r.Routes != nil {
		c.routeVals.AppendValues(schema.EncodeRoutes(r.Routes, len(r.PromptTokenIDs)+len(r.ResponseTokenIDs)), nil)
	}
}

// appendNullable appends *v to b, or a null when v is nil.
func appendNullable[T any, B interface {
	Append(T)
	AppendNull()
}](b B, v *T) {
	if v == nil {
		b.AppendNull()
		return
	}
	b.Append(*v)
}
