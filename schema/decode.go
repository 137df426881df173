package schema

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/trajflow/trajflow/pipeline"
)

// Check reports whether s is the output schema of the current Version,
// naming the first column that differs.
func Check(s *arrow.Schema) error { return check(s, arrowSchema, Version) }

func check(s, want *arrow.Schema, version string) error {
	if s.NumFields() != want.NumFields() {
		return fmt.Errorf("schema has %d columns, want %d (schema version %s)", s.NumFields(), want.NumFields(), version)
	}
	for i, w := range want.Fields() {
		got := s.Field(i)
		if got.Name != w.Name {
			return fmt.Errorf("column %d is %q, want %q (schema version %s)", i, got.Name, w.Name, version)
		}
		if !sameLayout(got.Type, w.Type) {
			return fmt.Errorf("column %q has type %s, want %s (schema version %s)", got.Name, got.Type, w.Type, version)
		}
	}
	return nil
}

// sameLayout reports whether two types have the same physical layout and
// struct field names. It ignores the name and nullability of list
// elements: Arrow's Parquet reader names them after the LIST's repeated
// group ("list") and marks them nullable whatever the file says.
func sameLayout(a, b arrow.DataType) bool {
	if a.ID() != b.ID() {
		return false
	}
	switch at := a.(type) {
	case *arrow.ListType:
		return sameLayout(at.Elem(), b.(*arrow.ListType).Elem())
	case *arrow.StructType:
		bt := b.(*arrow.StructType)
		if at.NumFields() != bt.NumFields() {
			return false
		}
		for i, f := range at.Fields() {
			if f.Name != bt.Field(i).Name || !sameLayout(f.Type, bt.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return arrow.TypeEqual(a, b)
}

// Rollouts decodes the rows of a record in the output schema (the current
// Version) back into rollouts: the inverse of Collator.Add for every
// written field. It also decodes a record of version 6, which has no
// routed_experts column (its rollouts' Routes are nil), and of version 5
// (or 4), which has no segments column either: its rollouts' Segments
// are empty (one segment). Routes are decoded by DecodeRoutes; a value
// that does not fit its row is an error naming the row. Tasks carry only Index and Raw; durations are rounded to
// the nanosecond. Rollouts of one task share one *pipeline.Task.
// EnvTokens gets env_tokens, which collate computes from the loss mask
// (0 where it is null); TokenIDsMissing is set where gen_tokens is null;
// gen_tokens and total_tokens, also derived from the training view, and
// turn_gen_tokens, derived from the messages' spans
// (pipeline.Rollout.TurnGenTokens), and min_policy_version, derived from
// policy_versions or the version answers were requested under
// (pipeline.Rollout.MinPolicyVersion), have no field and are not decoded.
//
// Each message gets its span (TokenStart, TokenEnd) and, when the span is
// not empty, its TokenIDs restored from the sequence PromptTokenIDs ++
// ResponseTokenIDs, and, for an assistant message whose span lies in the
// response, its Logprobs from ResponseLogprobs: what a rollout held before
// it was written, when its messages' ids were the sequence's. The
// restored slices are views of the rollout's own arrays (copied only when
// a span crosses from the prompt into the response): do not append to
// them. A message with an empty span has nil TokenIDs and Logprobs. A span
// that does not lie in the sequence is an error naming the row.
func Rollouts(rec arrow.Record) ([]*pipeline.Rollout, error) {
	// A record of version 5 (or 4, whose columns are version 5's) has
	// every column of the current version but the last, segments: its
	// rows decode with empty Segments (one segment each).
	// A record of version 6 has every column but routed_experts: its
	// rows decode with nil Routes.
	segmented, routed := true, true
	if err := Check(rec.Schema()); err != nil {
		switch {
		case CheckVersion(rec.Schema(), VersionV6) == nil:
			routed = false
		case CheckVersion(rec.Schema(), VersionV5) == nil:
			segmented, routed = false, false
		default:
			return nil, err
		}
	}
	col := rec.Columns()
	str := func(i int) *array.String { return col[i].(*array.String) }
	i64 := func(i int) *array.Int64 { return col[i].(*array.Int64) }
	i32 := func(i int) *array.Int32 { return col[i].(*array.Int32) }
	f64 := func(i int) *array.Float64 { return col[i].(*array.Float64) }
	bl := func(i int) *array.Boolean { return col[i].(*array.Boolean) }
	lst := func(i int) *array.List { return col[i].(*array.List) }

	msgs := lst(ColMessages)
	msg := msgs.ListValues().(*array.Struct)
	mTools := msg.Field(MsgToolCalls).(*array.List)
	tool := mTools.ListValues().(*array.Struct)
	mParts := msg.Field(MsgParts).(*array.List)
	part := mParts.ListValues().(*array.Struct)
	metrics := lst(ColMetrics)
	metric := metrics.ListValues().(*array.Struct)

	spans := lst(ColPolicyVersions)
	span := spans.ListValues().(*array.Struct)
	spanVersion := span.Field(SpanVersion).(*array.Int64)
	spanVersionMax := span.Field(SpanVersionMax).(*array.Int64)
	spanStart := span.Field(SpanStart).(*array.Int32)
	spanEnd := span.Field(SpanEnd).(*array.Int32)

	var segs *array.List
	var segMessage, segToken, segTurn *array.Int32
	if segmented {
		segs = lst(ColSegments)
		seg := segs.ListValues().(*array.Struct)
		segMessage = seg.Field(SegmentMessage).(*array.Int32)
		segToken = seg.Field(SegmentToken).(*array.Int32)
		segTurn = seg.Field(SegmentTurn).(*array.Int32)
	}

	var routes *array.List
	var routeVals []int16
	if routed {
		routes = lst(ColRoutedExperts)
		routeVals = routes.ListValues().(*array.Int16).Int16Values()
	}

	tasks := map[int64]*pipeline.Task{}
	out := make([]*pipeline.Rollout, 0, rec.NumRows())
	for i := 0; i < int(rec.NumRows()); i++ {
		ti := i64(ColTaskIndex).Value(i)
		raw := str(ColTask).Value(i)
		t := tasks[ti]
		if t == nil || string(t.Raw) != raw {
			t = &pipeline.Task{Index: ti}
			if raw != "" {
				t.Raw = json.RawMessage(raw)
			}
			tasks[ti] = t
		}
		r := &pipeline.Rollout{
			RunID:                 str(ColRunID).Value(i),
			Task:                  t,
			Attempt:               int(i32(ColAttempt).Value(i)),
			RolloutIndex:          int(i32(ColRolloutIndex).Value(i)),
			GroupSize:             int(i32(ColGroupSize).Value(i)),
			GroupID:               str(ColGroupID).Value(i),
			TrajID:                str(ColTrajID).Value(i),
			Seed:                  i64(ColSeed).Value(i),
			Env:                   str(ColEnv).Value(i),
			Model:                 str(ColModel).Value(i),
			Status:                pipeline.Status(str(ColStatus).Value(i)),
			ErrorClass:            str(ColErrorClass).Value(i),
			Reward:                f64(ColReward).Value(i),
			TurnRewards:           float64s(lst(ColTurnRewards), i),
			FinishReason:          str(ColFinishReason).Value(i),
			Terminated:            bl(ColTerminated).Value(i),
			Truncated:             bl(ColTruncated).Value(i),
			MaxTurnsReached:       bl(ColMaxTurnsReached).Value(i),
			NumTurns:              int(i32(ColNumTurns).Value(i)),
			TokenContinuityBreaks: int(i32(ColTokenContinuityBreaks).Value(i)),
			ToolCalls:             int(i32(ColToolCalls).Value(i)),
			Retries:               int(i32(ColRetries).Value(i)),
			PromptTokensDropped:   int(i32(ColPromptTokensDropped).Value(i)),
			InvalidActions:        int(i32(ColInvalidActions).Value(i)),
			AdmittedVersion:       i64(ColAdmittedVersion).Value(i),
			Sampling: pipeline.Sampling{
				Temperature: nullable(f64(ColTemperature), i),
				TopP:        nullable(f64(ColTopP), i),
				TopK:        nullable(i32(ColTopK), i),
				MaxTokens:   nullable(i32(ColMaxTokens), i),
			},
			GroupRewardMean:  f64(ColGroupRewardMean).Value(i),
			GroupRewardStd:   f64(ColGroupRewardStd).Value(i),
			Advantage:        f64(ColAdvantage).Value(i),
			Kept:             bl(ColKept).Value(i),
			FilterReason:     str(ColFilterReason).Value(i),
			PromptTokens:     int(i64(ColPromptTokens).Value(i)),
			CompletionTokens: int(i64(ColCompletionTokens).Value(i)),
			EnvTokens:        int(valueOr0(i64(ColEnvTokens), i)),
			TokenIDsMissing:  i64(ColGenTokens).IsNull(i),
			GenTime:          dur(f64(ColGenMS).Value(i)),
			EnvTime:          dur(f64(ColEnvMS).Value(i)),
			TotalTime:        dur(f64(ColTotalMS).Value(i)),
			Error:            str(ColError).Value(i),
			PromptTokenIDs:   int32s(lst(ColPromptTokenIDs), i),
			ResponseTokenIDs: int32s(lst(ColResponseTokenIDs), i),
			ResponseLogprobs: float32s(lst(ColResponseLogprobs), i),
		}
		if s, e := spans.ValueOffsets(i); e > s {
			r.PolicyVersions = make([]pipeline.VersionSpan, 0, e-s)
			for j := int(s); j < int(e); j++ {
				r.PolicyVersions = append(r.PolicyVersions, pipeline.VersionSpan{
					Version: spanVersion.Value(j), VersionMax: spanVersionMax.Value(j),
					Start: spanStart.Value(j), End: spanEnd.Value(j),
				})
			}
		}
		if segs != nil {
			if s, e := segs.ValueOffsets(i); e > s {
				r.Segments = make([]pipeline.Segment, 0, e-s)
				for j := int(s); j < int(e); j++ {
					r.Segments = append(r.Segments, pipeline.Segment{
						Message: segMessage.Value(j), Token: segToken.Value(j), Turn: segTurn.Value(j),
					})
				}
			}
		}
		if routes != nil && routes.IsValid(i) {
			s, e := routes.ValueOffsets(i)
			// A copy: the record's buffers are released after decoding.
			rt, err := DecodeRoutes(append(make([]int16, 0, e-s), routeVals[s:e]...), len(r.PromptTokenIDs)+len(r.ResponseTokenIDs))
			if err != nil {
				return nil, fmt.Errorf("row %d (%s): %w", i, r, err)
			}
			r.Routes = rt
		}
		if s, e := lst(ColLossMask).ValueOffsets(i); e > s {
			r.LossMask = append([]int8(nil), lst(ColLossMask).ListValues().(*array.Int8).Int8Values()[s:e]...)
		}
		if s, e := metrics.ValueOffsets(i); e > s {
			r.Metrics = make(map[string]float64, e-s)
			names := metric.Field(MetricName).(*array.String)
			vals := metric.Field(MetricValue).(*array.Float64)
			for j := int(s); j < int(e); j++ {
				r.Metrics[names.Value(j)] = vals.Value(j)
			}
		}
		if s, e := msgs.ValueOffsets(i); e > s {
			r.Messages = make([]pipeline.Message, 0, e-s)
			for j := int(s); j < int(e); j++ {
				m := pipeline.Message{
					Role:       msg.Field(MsgRole).(*array.String).Value(j),
					Content:    msg.Field(MsgContent).(*array.String).Value(j),
					ToolCallID: msg.Field(MsgToolCallID).(*array.String).Value(j),
					Name:       msg.Field(MsgName).(*array.String).Value(j),
					TokenStart: msg.Field(MsgTokenStart).(*array.Int32).Value(j),
					TokenEnd:   msg.Field(MsgTokenEnd).(*array.Int32).Value(j),
					Turn:       int(msg.Field(MsgTurn).(*array.Int32).Value(j)),
				}
				if err := restoreTokens(r, &m); err != nil {
					return nil, fmt.Errorf("row %d (%s) message %d: %w", i, r, j-int(s), err)
				}
				if ts, te := mTools.ValueOffsets(j); te > ts {
					for k := int(ts); k < int(te); k++ {
						m.ToolCalls = append(m.ToolCalls, pipeline.ToolCall{
							ID:        tool.Field(ToolID).(*array.String).Value(k),
							Type:      tool.Field(ToolType).(*array.String).Value(k),
							Name:      tool.Field(ToolName).(*array.String).Value(k),
							Arguments: tool.Field(ToolArguments).(*array.String).Value(k),
						})
					}
				}
				if ps, pe := mParts.ValueOffsets(j); pe > ps {
					for k := int(ps); k < int(pe); k++ {
						m.Parts = append(m.Parts, pipeline.ContentPart{
							Type:     part.Field(PartType).(*array.String).Value(k),
							Text:     part.Field(PartText).(*array.String).Value(k),
							ImageURL: part.Field(PartImageURL).(*array.String).Value(k),
						})
					}
				}
				r.Messages = append(r.Messages, m)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// restoreTokens sets m's TokenIDs and Logprobs from its span in r's
// sequence.
func restoreTokens(r *pipeline.Rollout, m *pipeline.Message) error {
	start, end := int(m.TokenStart), int(m.TokenEnd)
	if start == end {
		return nil
	}
	p, n := len(r.PromptTokenIDs), len(r.PromptTokenIDs)+len(r.ResponseTokenIDs)
	if start < 0 || start > end || end > n {
		return fmt.Errorf("token span [%d, %d) does not lie in the sequence of %d tokens", start, end, n)
	}
	switch {
	case end <= p:
		m.TokenIDs = r.PromptTokenIDs[start:end:end]
	case start >= p:
		m.TokenIDs = r.ResponseTokenIDs[start-p : end-p : end-p]
		if m.Role == pipeline.RoleAssistant && len(r.ResponseLogprobs) == len(r.ResponseTokenIDs) {
			m.Logprobs = r.ResponseLogprobs[start-p : end-p : end-p]
		}
	default:
		m.TokenIDs = append(append(make([]int32, 0, end-start), r.PromptTokenIDs[start:]...), r.ResponseTokenIDs[:end-p]...)
	}
	return nil
}

func dur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

func int32s(l *array.List, i int) []int32 {
	s, e := l.ValueOffsets(i)
	if e <= s {
		return nil
	}
	return append([]int32(nil), l.ListValues().(*array.Int32).Int32Values()[s:e]...)
}

func float32s(l *array.List, i int) []float32 {
	s, e := l.ValueOffsets(i)
	if e <= s {
		return nil
	}
	return append([]float32(nil), l.ListValues().(*array.Float32).Float32Values()[s:e]...)
}

func float64s(l *array.List, i int) []float64 {
	s, e := l.ValueOffsets(i)
	if e <= s {
		return nil
	}
	return append([]float64(nil), l.ListValues().(*array.Float64).Float64Values()[s:e]...)
}

// nullable returns a pointer to row i's value of a, nil where it is null.
func nullable[T any](a interface {
	IsNull(int) bool
	Value(int) T
}, i int) *T {
	if a.IsNull(i) {
		return nil
	}
	v := a.Value(i)
	return &v
}

// valueOr0 is a's value at i, 0 where it is null (a reader may leave
// anything in a null slot).
func valueOr0(a *array.Int64, i int) int64 {
	if a.IsNull(i) {
		return 0
	}
	return a.Value(i)
}
