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
//
// Version 4 records which policy produced each token and how it was
// sampled: policy_versions (spans of generated tokens and their policy
// version), admitted_version, min_policy_version, and the sampling
// parameters temperature, top_p, top_k and max_tokens (nullable).
//
// Version 5 makes env_tokens, gen_tokens and total_tokens nullable: null
// where the training view's counts are unknown (a reply came without token
// ids, pipeline.Rollout.TokenIDsMissing), where version 4 wrote 0; there
// turn_gen_tokens is empty where version 4 wrote a 0 per turn.
//
// Version 6 adds segments: where an agent rewrote its history (one entry
// per rewrite: the message, token and turn the new segment starts at).
//
// Version 7 adds routed_experts: the experts a mixture-of-experts engine
// routed each position of the training view to (nullable; see
// EncodeRoutes).
const Version = "7"

// Column indices of Schema, in order: Columns()[ColX] is column ColX.
// Keys and light columns come first, heavy columns (task, messages, token
// ids) last, so that readers that select light columns touch only the
// front of each row group.
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
	ColAdmittedVersion
	ColMinPolicyVersion
	ColTemperature
	ColTopP
	ColTopK
	ColMaxTokens
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
	ColPolicyVersions
	ColSegments
	ColRoutedExperts
	NumColumns
)

// Indices of the fields of a messages element: MessageFields()[MsgX] is
// field MsgX.
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

// Indices of the fields of a policy_versions element.
const (
	SpanVersion = iota
	SpanVersionMax
	SpanStart
	SpanEnd
)

// Indices of the fields of a segments element.
const (
	SegmentMessage = iota
	SegmentToken
	SegmentTurn
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
	versionSpanType = arrow.StructOf(
		field("version", arrow.PrimitiveTypes.Int64),
		field("version_max", arrow.PrimitiveTypes.Int64),
		field("start", arrow.PrimitiveTypes.Int32),
		field("end", arrow.PrimitiveTypes.Int32),
	)
	segmentType = arrow.StructOf(
		field("message", arrow.PrimitiveTypes.Int32),
		field("token", arrow.PrimitiveTypes.Int32),
		field("turn", arrow.PrimitiveTypes.Int32),
	)
	metricType = arrow.StructOf(
		field("name", arrow.BinaryTypes.String),
		field("value", arrow.PrimitiveTypes.Float64),
	)

	arrowSchema = arrow.NewSchema(fields(columns), nil)
)

// Schema returns the output schema: one row per rollout, every field
// non-nullable (absent values are empty strings, empty lists and zeros)
// but the sampling parameters, null when not sent, and the training
// view's counts (env_tokens, gen_tokens, total_tokens), null when
// unknown.
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
