package schema

import (
	"github.com/apache/arrow/go/v17/arrow"
)

// Version is the version of the output schema. It changes whenever a
// column is added, removed, renamed or changes type, and is written into
// every output file's key-value metadata (trajflow.schema_version).
//
// Version 2 stores every token id once, in the training view
// (prompt_token_ids, response_token_ids, loss_mask, response_logprobs):
// each message records its span in that sequence (token_start, token_end)
// where version 1 kept a copy of its token ids and logprobs. It also adds
// the per-sample counts gen_tokens and total_tokens, and turn_gen_tokens,
// the tokens generated in each turn.
//
// Version 3 adds prompt_tokens_dropped, the ids of the prompt that
// prompt.max_tokens cut, invalid_actions, the steps whose action the
// environment marked invalid, and messages.parts, the content parts of a
// message that holds images.
const Version = "3"

// Column indices of Schema, in order. Keys and light columns come first,
// heavy columns (task, messages, token ids) last, so that readers that
// select light columns touch only the front of each row group.
const (
	ColRunID = iota
	ColTaskIndex
	ColAttempt
	ColRolloutIndex
	ColGroupID
	ColTrajID
	ColSeed
	ColGroupSize
	ColEnv
	ColModel
	ColStatus
	ColErrorClass
	ColReward
	ColTurnRewards
	ColMetrics
	ColFinishReason
	ColTerminated
	ColTruncated
	ColMaxTurnsReached
	ColNumTurns
	ColTokenContinuityBreaks
	ColToolCalls
	ColRetries
	ColGroupRewardMean
	ColGroupRewardStd
	ColAdvantage
	ColKept
	ColFilterReason
	ColPromptTokens
	ColCompletionTokens
	ColEnvTokens
	ColGenTokens
	ColTotalTokens
	ColTurnGenTokens
	ColPromptTokensDropped
	ColInvalidActions
	ColGenMS
	ColEnvMS
	ColTotalMS
	ColError
	ColTask
	ColMessages
	ColPromptTokenIDs
	ColResponseTokenIDs
	ColLossMask
	ColResponseLogprobs
	NumColumns
)

// Indices of the fields of a messages element.
const (
	MsgRole = iota
	MsgContent
	MsgToolCalls
	MsgToolCallID
	MsgName
	MsgTokenStart
	MsgTokenEnd
	MsgTurn
	MsgParts
)

// Indices of the fields of a messages.parts element.
const (
	PartType = iota
	PartText
	PartImageURL
)

// Indices of the fields of a tool_calls element.
const (
	ToolID = iota
	ToolType
	ToolName
	ToolArguments
)

// Indices of the fields of a metrics element.
const (
	MetricName = iota
	MetricValue
)

// ListOf returns a non-nullable list of non-nullable elements whose element
// field is named "element", the name the Parquet LIST layout uses, so that a
// schema read back from Parquet equals the one written.
func ListOf(t arrow.DataType) *arrow.ListType {
	return arrow.ListOfField(arrow.Field{Name: "element", Type: t, Nullable: false})
}

func field(name string, t arrow.DataType) arrow.Field {
	return arrow.Field{Name: name, Type: t, Nullable: false}
}

var (
	toolCallType = arrow.StructOf(
		field("id", arrow.BinaryTypes.String),
		field("type", arrow.BinaryTypes.String),
		field("name", arrow.BinaryTypes.String),
		field("arguments", arrow.BinaryTypes.String),
	)
	partType = arrow.StructOf(
		field("type", arrow.BinaryTypes.String),
		field("text", arrow.BinaryTypes.String),
		field("image_url", arrow.BinaryTypes.String),
	)
	messageType = arrow.StructOf(
		field("role", arrow.BinaryTypes.String),
		field("content", arrow.BinaryTypes.String),
		field("tool_calls", ListOf(toolCallType)),
		field("tool_call_id", arrow.BinaryTypes.String),
		field("name", arrow.BinaryTypes.String),
		field("token_start", arrow.PrimitiveTypes.Int32),
		field("token_end", arrow.PrimitiveTypes.Int32),
		field("turn", arrow.PrimitiveTypes.Int32),
		field("parts", ListOf(partType)),
	)
	metricType = arrow.StructOf(
		field("name", arrow.BinaryTypes.String),
		field("value", arrow.PrimitiveTypes.Float64),
	)

	arrowSchema = arrow.NewSchema([]arrow.Field{
		ColRunID:                 field("run_id", arrow.BinaryTypes.String),
		ColTaskIndex:             field("task_index", arrow.PrimitiveTypes.Int64),
		ColAttempt:               field("attempt", arrow.PrimitiveTypes.Int32),
		ColRolloutIndex:          field("rollout_index", arrow.PrimitiveTypes.Int32),
		ColGroupID:               field("group_id", arrow.BinaryTypes.String),
		ColTrajID:                field("traj_id", arrow.BinaryTypes.String),
		ColSeed:                  field("seed", arrow.PrimitiveTypes.Int64),
		ColGroupSize:             field("group_size", arrow.PrimitiveTypes.Int32),
		ColEnv:                   field("env", arrow.BinaryTypes.String),
		ColModel:                 field("model", arrow.BinaryTypes.String),
		ColStatus:                field("status", arrow.BinaryTypes.String),
		ColErrorClass:            field("error_class", arrow.BinaryTypes.String),
		ColReward:                field("reward", arrow.PrimitiveTypes.Float64),
		ColTurnRewards:           field("turn_rewards", ListOf(arrow.PrimitiveTypes.Float64)),
		ColMetrics:               field("metrics", ListOf(metricType)),
		ColFinishReason:          field("finish_reason", arrow.BinaryTypes.String),
		ColTerminated:            field("terminated", arrow.FixedWidthTypes.Boolean),
		ColTruncated:             field("truncated", arrow.FixedWidthTypes.Boolean),
		ColMaxTurnsReached:       field("max_turns_reached", arrow.FixedWidthTypes.Boolean),
		ColNumTurns:              field("num_turns", arrow.PrimitiveTypes.Int32),
		ColTokenContinuityBreaks: field("token_continuity_breaks", arrow.PrimitiveTypes.Int32),
		ColToolCalls:             field("tool_calls", arrow.PrimitiveTypes.Int32),
		ColRetries:               field("retries", arrow.PrimitiveTypes.Int32),
		ColGroupRewardMean:       field("group_reward_mean", arrow.PrimitiveTypes.Float64),
		ColGroupRewardStd:        field("group_reward_std", arrow.PrimitiveTypes.Float64),
		ColAdvantage:             field("advantage", arrow.PrimitiveTypes.Float64),
		ColKept:                  field("kept", arrow.FixedWidthTypes.Boolean),
		ColFilterReason:          field("filter_reason", arrow.BinaryTypes.String),
		ColPromptTokens:          field("prompt_tokens", arrow.PrimitiveTypes.Int64),
		ColCompletionTokens:      field("completion_tokens", arrow.PrimitiveTypes.Int64),
		ColEnvTokens:             field("env_tokens", arrow.PrimitiveTypes.Int64),
		ColGenTokens:             field("gen_tokens", arrow.PrimitiveTypes.Int64),
		ColTotalTokens:           field("total_tokens", arrow.PrimitiveTypes.Int64),
		ColTurnGenTokens:         field("turn_gen_tokens", ListOf(arrow.PrimitiveTypes.Int32)),
		ColPromptTokensDropped:   field("prompt_tokens_dropped", arrow.PrimitiveTypes.Int32),
		ColInvalidActions:        field("invalid_actions", arrow.PrimitiveTypes.Int32),
		ColGenMS:                 field("gen_ms", arrow.PrimitiveTypes.Float64),
		ColEnvMS:                 field("env_ms", arrow.PrimitiveTypes.Float64),
		ColTotalMS:               field("total_ms", arrow.PrimitiveTypes.Float64),
		ColError:                 field("error", arrow.BinaryTypes.String),
		ColTask:                  field("task", arrow.BinaryTypes.String),
		ColMessages:              field("messages", ListOf(messageType)),
		ColPromptTokenIDs:        field("prompt_token_ids", ListOf(arrow.PrimitiveTypes.Int32)),
		ColResponseTokenIDs:      field("response_token_ids", ListOf(arrow.PrimitiveTypes.Int32)),
		ColLossMask:              field("loss_mask", ListOf(arrow.PrimitiveTypes.Int8)),
		ColResponseLogprobs:      field("response_logprobs", ListOf(arrow.PrimitiveTypes.Float32)),
	}, nil)
)

// Schema returns the output schema: one row per rollout, every field
// non-nullable (absent values are empty strings, empty lists and zeros).
// The returned schema is shared; do not modify it.
func Schema() *arrow.Schema { return arrowSchema }

// LightColumns are the columns cheap to read: keys, outcome, group
// statistics and cost. Everything else (error, task, messages, token ids,
// logprobs) is heavy.
func LightColumns() []string {
	out := make([]string, 0, ColError)
	for _, f := range arrowSchema.Fields()[:ColError] {
		out = append(out, f.Name)
	}
	return out
}
