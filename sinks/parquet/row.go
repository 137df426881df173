package parquet

import (
	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/trajflow/trajflow/schema"
)

// row mirrors schema.Schema field by field. The list tags give the
// three-level LIST layout that Arrow's Parquet reader maps back to the
// same Arrow list types.
type row struct {
	RunID                 string    `parquet:"run_id"`
	TaskIndex             int64     `parquet:"task_index"`
	Attempt               int32     `parquet:"attempt"`
	RolloutIndex          int32     `parquet:"rollout_index"`
	GroupID               string    `parquet:"group_id"`
	TrajID                string    `parquet:"traj_id"`
	Seed                  int64     `parquet:"seed"`
	GroupSize             int32     `parquet:"group_size"`
	Env                   string    `parquet:"env"`
	Model                 string    `parquet:"model"`
	Status                string    `parquet:"status"`
	ErrorClass            string    `parquet:"error_class"`
	Reward                float64   `parquet:"reward"`
	TurnRewards           []float64 `parquet:"turn_rewards,list"`
	Metrics               []metric  `parquet:"metrics,list"`
	FinishReason          string    `parquet:"finish_reason"`
	Terminated            bool      `parquet:"terminated"`
	Truncated             bool      `parquet:"truncated"`
	MaxTurnsReached       bool      `parquet:"max_turns_reached"`
	NumTurns              int32     `parquet:"num_turns"`
	TokenContinuityBreaks int32     `parquet:"token_continuity_breaks"`
	ToolCalls             int32     `parquet:"tool_calls"`
	Retries               int32     `parquet:"retries"`
	GroupRewardMean       float64   `parquet:"group_reward_mean"`
	GroupRewardStd        float64   `parquet:"group_reward_std"`
	Advantage             float64   `parquet:"advantage"`
	Kept                  bool      `parquet:"kept"`
	FilterReason          string    `parquet:"filter_reason"`
	PromptTokens          int64     `parquet:"prompt_tokens"`
	CompletionTokens      int64     `parquet:"completion_tokens"`
	EnvTokens             int64     `parquet:"env_tokens"`
	GenTokens             int64     `parquet:"gen_tokens"`
	TotalTokens           int64     `parquet:"total_tokens"`
	TurnGenTokens         []int32   `parquet:"turn_gen_tokens,list"`
	PromptTokensDropped   int32     `parquet:"prompt_tokens_dropped"`
	InvalidActions        int32     `parquet:"invalid_actions"`
	AdmittedVersion       int64     `parquet:"admitted_version"`
	MinPolicyVersion      int64     `parquet:"min_policy_version"`
	Temperature           *float64  `parquet:"temperature,optional"`
	TopP                  *float64  `parquet:"top_p,optional"`
	TopK                  *int32    `parquet:"top_k,optional"`
	MaxTokens             *int32    `parquet:"max_tokens,optional"`
	GenMS                 float64   `parquet:"gen_ms"`
	EnvMS                 float64   `parquet:"env_ms"`
	TotalMS               float64   `parquet:"total_ms"`
	Error                 string    `parquet:"error"`
	Task                  string    `parquet:"task"`
	Messages              []message `parquet:"messages,list"`
	PromptTokenIDs        []int32   `parquet:"prompt_token_ids,list"`
	ResponseTokenIDs      []int32   `parquet:"response_token_ids,list"`
	LossMask              []int8    `parquet:"loss_mask,list"`
	ResponseLogprobs      []float32 `parquet:"response_logprobs,list"`
	PolicyVersions        []span    `parquet:"policy_versions,list"`
}

type span struct {
	Version    int64 `parquet:"version"`
	VersionMax int64 `parquet:"version_max"`
	Start      int32 `parquet:"start"`
	End        int32 `parquet:"end"`
}

type metric struct {
	Name  string  `parquet:"name"`
	Value float64 `parquet:"value"`
}

type toolCall struct {
	ID        string `parquet:"id"`
	Type      string `parquet:"type"`
	Name      string `parquet:"name"`
	Arguments string `parquet:"arguments"`
}

type message struct {
	Role       string     `parquet:"role"`
	Content    string     `parquet:"content"`
	ToolCalls  []toolCall `parquet:"tool_calls,list"`
	ToolCallID string     `parquet:"tool_call_id"`
	Name       string     `parquet:"name"`
	TokenStart int32      `parquet:"token_start"`
	TokenEnd   int32      `parquet:"token_end"`
	Turn       int32      `parquet:"turn"`
	Parts      []part     `parquet:"parts,list"`
}

type part struct {
	Type     string `parquet:"type"`
	Text     string `parquet:"text"`
	ImageURL string `parquet:"image_url"`
}

// converter turns records into rows. Its slices are reused between
// records; reset drops every reference into the last record's buffers.
type converter struct {
	rows    []row
	msgs    []message
	tools   []toolCall
	parts   []part
	metrics []metric
	spans   []span
}

// listSlice returns row i of a list array as a subslice of vals, the
// list's flattened values (no copy).
func listSlice[T any](l *array.List, vals []T, i int) []T {
	s, e := l.ValueOffsets(i)
	if e <= s {
		return nil
	}
	return vals[s:e:e]
}

// convert fills c.rows from rec, whose schema schema.Check accepted.
// Strings are arrow's zero-copy views of the value buffers.
func (c *converter) convert(rec arrow.Record) []row {
	n := int(rec.NumRows())
	col := rec.Columns()
	str := func(i int) *array.String { return col[i].(*array.String) }
	i64 := func(i int) []int64 { return col[i].(*array.Int64).Int64Values() }
	i32 := func(i int) []int32 { return col[i].(*array.Int32).Int32Values() }
	f64 := func(i int) []float64 { return col[i].(*array.Float64).Float64Values() }
	bl := func(i int) *array.Boolean { return col[i].(*array.Boolean) }
	lst := func(i int) *array.List { return col[i].(*array.List) }

	turnRewards := lst(schema.ColTurnRewards)
	turnRewardVals := turnRewards.ListValues().(*array.Float64).Float64Values()
	turnGen := lst(schema.ColTurnGenTokens)
	turnGenVals := turnGen.ListValues().(*array.Int32).Int32Values()
	metrics := lst(schema.ColMetrics)
	metricSt := metrics.ListValues().(*array.Struct)
	metricName := metricSt.Field(schema.MetricName).(*array.String)
	metricVal := metricSt.Field(schema.MetricValue).(*array.Float64).Float64Values()
	msgs := lst(schema.ColMessages)
	msgSt := msgs.ListValues().(*array.Struct)
	mRole := msgSt.Field(schema.MsgRole).(*array.String)
	mContent := msgSt.Field(schema.MsgContent).(*array.String)
	mTools := msgSt.Field(schema.MsgToolCalls).(*array.List)
	toolSt := mTools.ListValues().(*array.Struct)
	tID := toolSt.Field(schema.ToolID).(*array.String)
	tType := toolSt.Field(schema.ToolType).(*array.String)
	tName := toolSt.Field(schema.ToolName).(*array.String)
	tArgs := toolSt.Field(schema.ToolArguments).(*array.String)
	mToolCallID := msgSt.Field(schema.MsgToolCallID).(*array.String)
	mName := msgSt.Field(schema.MsgName).(*array.String)
	mTokStart := msgSt.Field(schema.MsgTokenStart).(*array.Int32).Int32Values()
	mTokEnd := msgSt.Field(schema.MsgTokenEnd).(*array.Int32).Int32Values()
	mTurn := msgSt.Field(schema.MsgTurn).(*array.Int32).Int32Values()
	mParts := msgSt.Field(schema.MsgParts).(*array.List)
	partSt := mParts.ListValues().(*array.Struct)
	pType := partSt.Field(schema.PartType).(*array.String)
	pText := partSt.Field(schema.PartText).(*array.String)
	pURL := partSt.Field(schema.PartImageURL).(*array.String)
	promptIDs := lst(schema.ColPromptTokenIDs)
	promptIDVals := promptIDs.ListValues().(*array.Int32).Int32Values()
	respIDs := lst(schema.ColResponseTokenIDs)
	respIDVals := respIDs.ListValues().(*array.Int32).Int32Values()
	lossMask := lst(schema.ColLossMask)
	lossMaskVals := lossMask.ListValues().(*array.Int8).Int8Values()
	respLP := lst(schema.ColResponseLogprobs)
	respLPVals := respLP.ListValues().(*array.Float32).Float32Values()

	spans := lst(schema.ColPolicyVersions)
	spanSt := spans.ListValues().(*array.Struct)
	spanV := spanSt.Field(schema.SpanVersion).(*array.Int64).Int64Values()
	spanVMax := spanSt.Field(schema.SpanVersionMax).(*array.Int64).Int64Values()
	spanStart := spanSt.Field(schema.SpanStart).(*array.Int32).Int32Values()
	spanEnd := spanSt.Field(schema.SpanEnd).(*array.Int32).Int32Values()
	temp, topP := col[schema.ColTemperature].(*array.Float64), col[schema.ColTopP].(*array.Float64)
	topK, maxTok := col[schema.ColTopK].(*array.Int32), col[schema.ColMaxTokens].(*array.Int32)

	// Whole-record element arenas, subsliced per row.
	c.spans = grow(c.spans, spanSt.Len())
	for j := range c.spans {
		c.spans[j] = span{Version: spanV[j], VersionMax: spanVMax[j], Start: spanStart[j], End: spanEnd[j]}
	}
	c.metrics = grow(c.metrics, metricSt.Len())
	for j := range c.metrics {
		c.metrics[j] = metric{Name: metricName.Value(j), Value: metricVal[j]}
	}
	c.tools = grow(c.tools, toolSt.Len())
	for j := range c.tools {
		c.tools[j] = toolCall{ID: tID.Value(j), Type: tType.Value(j), Name: tName.Value(j), Arguments: tArgs.Value(j)}
	}
	c.parts = grow(c.parts, partSt.Len())
	for j := range c.parts {
		c.parts[j] = part{Type: pType.Value(j), Text: pText.Value(j), ImageURL: pURL.Value(j)}
	}
	c.msgs = grow(c.msgs, msgSt.Len())
	for j := range c.msgs {
		c.msgs[j] = message{
			Role:       mRole.Value(j),
			Content:    mContent.Value(j),
			ToolCalls:  listSlice(mTools, c.tools, j),
			ToolCallID: mToolCallID.Value(j),
			Name:       mName.Value(j),
			TokenStart: mTokStart[j],
			TokenEnd:   mTokEnd[j],
			Turn:       mTurn[j],
			Parts:      listSlice(mParts, c.parts, j),
		}
	}

	taskIndex, seed := i64(schema.ColTaskIndex), i64(schema.ColSeed)
	pt, ct, et := i64(schema.ColPromptTokens), i64(schema.ColCompletionTokens), i64(schema.ColEnvTokens)
	gt, tt := i64(schema.ColGenTokens), i64(schema.ColTotalTokens)
	attempt, rolloutIndex, groupSize := i32(schema.ColAttempt), i32(schema.ColRolloutIndex), i32(schema.ColGroupSize)
	numTurns, breaks, tools, retries := i32(schema.ColNumTurns), i32(schema.ColTokenContinuityBreaks), i32(schema.ColToolCalls), i32(schema.ColRetries)
	reward, mean, std, adv := f64(schema.ColReward), f64(schema.ColGroupRewardMean), f64(schema.ColGroupRewardStd), f64(schema.ColAdvantage)
	dropped, invalid := i32(schema.ColPromptTokensDropped), i32(schema.ColInvalidActions)
	admitted, minVersion := i64(schema.ColAdmittedVersion), i64(schema.ColMinPolicyVersion)
	genMS, envMS, totalMS := f64(schema.ColGenMS), f64(schema.ColEnvMS), f64(schema.ColTotalMS)

	c.rows = grow(c.rows, n)
	for i := range c.rows {
		c.rows[i] = row{
			RunID:                 str(schema.ColRunID).Value(i),
			TaskIndex:             taskIndex[i],
			Attempt:               attempt[i],
			RolloutIndex:          rolloutIndex[i],
			GroupID:               str(schema.ColGroupID).Value(i),
			TrajID:                str(schema.ColTrajID).Value(i),
			Seed:                  seed[i],
			GroupSize:             groupSize[i],
			Env:                   str(schema.ColEnv).Value(i),
			Model:                 str(schema.ColModel).Value(i),
			Status:                str(schema.ColStatus).Value(i),
			ErrorClass:            str(schema.ColErrorClass).Value(i),
			Reward:                reward[i],
			TurnRewards:           listSlice(turnRewards, turnRewardVals, i),
			Metrics:               listSlice(metrics, c.metrics, i),
			FinishReason:          str(schema.ColFinishReason).Value(i),
			Terminated:            bl(schema.ColTerminated).Value(i),
			Truncated:             bl(schema.ColTruncated).Value(i),
			MaxTurnsReached:       bl(schema.ColMaxTurnsReached).Value(i),
			NumTurns:              numTurns[i],
			TokenContinuityBreaks: breaks[i],
			ToolCalls:             tools[i],
			Retries:               retries[i],
			GroupRewardMean:       mean[i],
			GroupRewardStd:        std[i],
			Advantage:             adv[i],
			Kept:                  bl(schema.ColKept).Value(i),
			FilterReason:          str(schema.ColFilterReason).Value(i),
			PromptTokens:          pt[i],
			CompletionTokens:      ct[i],
			EnvTokens:             et[i],
			GenTokens:             gt[i],
			TotalTokens:           tt[i],
			TurnGenTokens:         listSlice(turnGen, turnGenVals, i),
			PromptTokensDropped:   dropped[i],
			InvalidActions:        invalid[i],
			AdmittedVersion:       admitted[i],
			MinPolicyVersion:      minVersion[i],
			Temperature:           valueAt(temp, temp.Float64Values(), i),
			TopP:                  valueAt(topP, topP.Float64Values(), i),
			TopK:                  valueAt(topK, topK.Int32Values(), i),
			MaxTokens:             valueAt(maxTok, maxTok.Int32Values(), i),
			GenMS:                 genMS[i],
			EnvMS:                 envMS[i],
			TotalMS:               totalMS[i],
			Error:                 str(schema.ColError).Value(i),
			Task:                  str(schema.ColTask).Value(i),
			Messages:              listSlice(msgs, c.msgs, i),
			PromptTokenIDs:        listSlice(promptIDs, promptIDVals, i),
			ResponseTokenIDs:      listSlice(respIDs, respIDVals, i),
			LossMask:              listSlice(lossMask, lossMaskVals, i),
			ResponseLogprobs:      listSlice(respLP, respLPVals, i),
			PolicyVersions:        listSlice(spans, c.spans, i),
		}
	}
	return c.rows
}

// reset drops the references into the last record's buffers.
func (c *converter) reset() {
	clear(c.rows)
	clear(c.msgs)
	clear(c.tools)
	clear(c.parts)
	clear(c.metrics)
	clear(c.spans)
}

// valueAt points at row i's value in vals (a's values; no copy), or is
// nil where a is null.
func valueAt[T any](a arrow.Array, vals []T, i int) *T {
	if a.IsNull(i) {
		return nil
	}
	return &vals[i]
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
