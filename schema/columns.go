package schema

import (
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
)

// Column is one column of an output table, or one field of a struct
// column's elements: everything the output contract says of it. The Arrow
// schemas (Schema, StepSchema) are built from the tables of Columns,
// MessageFields and StepColumns; the Parquet row types of sinks/parquet,
// the collate stage's builders, the decoders and SCHEMA.md's column tables
// are locked to them by tests.
type Column struct {
	// Name is the column's name in Arrow and Parquet.
	Name string
	// Type is the column's Arrow type. Lists hold non-nullable elements
	// named "element" (ListOf); struct fields are non-nullable.
	Type arrow.DataType
	// Nullable is true for a column whose absent value is null rather than
	// an empty string, an empty list or a zero.
	Nullable bool
	// Doc is the column's meaning, one line of Markdown (SCHEMA.md).
	Doc string
	// Dict has the Parquet writer encode the column's values with a
	// dictionary (RLE_DICTIONARY: each value a bit-packed index): for
	// values of few distinct ids, such as expert ids, smaller and several
	// times faster to write than plain values under zstd.
	Dict bool
}

// Field returns the column as an Arrow field.
func (c Column) Field() arrow.Field {
	return arrow.Field{Name: c.Name, Type: c.Type, Nullable: c.Nullable}
}

// ParquetType returns the column's type as written to Parquet: the
// physical type, with its logical type in parentheses where it has one
// (BYTE_ARRAY (STRING), INT32 (INT(8, signed))), "LIST of" the element's
// type for a list (the three-level LIST layout) and group(FIELD TYPE, …)
// for a struct.
func (c Column) ParquetType() string { return parquetType(c.Type) }

func parquetType(t arrow.DataType) string {
	switch t := t.(type) {
	case *arrow.ListType:
		return "LIST of " + parquetType(t.Elem())
	case *arrow.StructType:
		parts := make([]string, t.NumFields())
		for i, f := range t.Fields() {
			parts[i] = f.Name + " " + parquetType(f.Type)
		}
		return "group(" + strings.Join(parts, ", ") + ")"
	}
	switch t.ID() {
	case arrow.STRING:
		return "BYTE_ARRAY (STRING)"
	case arrow.INT64:
		return "INT64"
	case arrow.INT32:
		return "INT32"
	case arrow.INT16:
		return "INT32 (INT(16, signed))"
	case arrow.INT8:
		return "INT32 (INT(8, signed))"
	case arrow.FLOAT64:
		return "DOUBLE"
	case arrow.FLOAT32:
		return "FLOAT"
	case arrow.BOOL:
		return "BOOLEAN"
	}
	panic(fmt.Sprintf("schema: no Parquet type for Arrow type %s", t))
}

// ArrowType returns the column's Arrow type in SCHEMA.md's short form:
// utf8, int32, list<float64>, struct<name: utf8, value: float64>, and
// struct<a, b: utf8> for a struct whose fields share one type.
func (c Column) ArrowType() string { return arrowType(c.Type) }

func arrowType(t arrow.DataType) string {
	switch t := t.(type) {
	case *arrow.ListType:
		return "list<" + arrowType(t.Elem()) + ">"
	case *arrow.StructType:
		fs := t.Fields()
		same := true
		for _, f := range fs[1:] {
			same = same && arrow.TypeEqual(f.Type, fs[0].Type)
		}
		parts := make([]string, len(fs))
		for i, f := range fs {
			parts[i] = f.Name
			if !same {
				parts[i] += ": " + arrowType(f.Type)
			}
		}
		s := strings.Join(parts, ", ")
		if same {
			s += ": " + arrowType(fs[0].Type)
		}
		return "struct<" + s + ">"
	}
	return t.String()
}

// Columns returns the columns of the rollout table (Schema), in order:
// Columns()[ColX] is column ColX. The slice is a copy.
func Columns() []Column { return slices.Clone(columns) }

// MessageFields returns the fields of a messages element, in order:
// MessageFields()[MsgX] is field MsgX. The slice is a copy.
func MessageFields() []Column { return slices.Clone(messageFields) }

// StepColumns returns the columns of the step table (StepSchema), in
// order. The slice is a copy.
func StepColumns() []Column { return slices.Clone(stepColumns) }

// ColumnName returns the name of column ColX of the rollout table.
func ColumnName(col int) string { return columns[col].Name }

// SpanFieldName returns the name of field SpanX of a policy_versions
// element.
func SpanFieldName(field int) string { return versionSpanType.Field(field).Name }

// fields returns cols as Arrow fields.
func fields(cols []Column) []arrow.Field {
	out := make([]arrow.Field, len(cols))
	for i, c := range cols {
		out[i] = c.Field()
	}
	return out
}

// columns is the rollout table: keys and light columns first, heavy
// columns (error, task, messages, token ids) last, so that readers that
// select light columns touch only the front of each row group. Its order
// is that of the Col constants.
var columns = []Column{
	{Name: "run_id", Type: arrow.BinaryTypes.String, Doc: "name of the run (`run.id`, default: the output directory's name)"},
	{Name: "task_index", Type: arrow.PrimitiveTypes.Int64, Doc: "0-based position of the task in the input; stable across shards and resumes"},
	{Name: "attempt", Type: arrow.PrimitiveTypes.Int32, Doc: "sampling round of the task (dynamic sampling may give a task several)"},
	{Name: "rollout_index", Type: arrow.PrimitiveTypes.Int32, Doc: "index of the rollout inside its group, 0..n-1"},
	{Name: "group_id", Type: arrow.BinaryTypes.String, Doc: "id of the group (one task in one attempt)"},
	{Name: "traj_id", Type: arrow.BinaryTypes.String, Doc: "unique id of the trajectory"},
	{Name: "seed", Type: arrow.PrimitiveTypes.Int64, Doc: "the rollout's seed: the one sent with its requests, or, when none is sent (no `repeat.seed`, no row seed), the seed trajflow derived for it (environments still read it)"},
	{Name: "group_size", Type: arrow.PrimitiveTypes.Int32, Doc: "n, the number of rollouts in the group"},
	{Name: "env", Type: arrow.BinaryTypes.String, Doc: "environment name"},
	{Name: "model", Type: arrow.BinaryTypes.String, Doc: "model name sent to the server"},
	{Name: "status", Type: arrow.BinaryTypes.String, Doc: "`ok`, `error`, `cancelled` or `filtered`"},
	{Name: "error_class", Type: arrow.BinaryTypes.String, Doc: "class of the error when `status = error` (e.g. `server`, `timeout`, `env`)"},
	{Name: "reward", Type: arrow.PrimitiveTypes.Float64, Doc: "total reward of the rollout (summed over turns)"},
	{Name: "turn_rewards", Type: ListOf(arrow.PrimitiveTypes.Float64), Doc: "reward of each turn"},
	{Name: "metrics", Type: ListOf(metricType), Doc: "named numbers from the environment (e.g. `acc`), sorted by name; `invalid_actions` is trajflow's count of the actions the environment marked invalid, present on every row whose environment judged an action's validity (see [docs/environments.md](docs/environments.md#action-validity-and-anchor-states)); `cached_prompt_tokens` counts the prompt tokens the server served from its prompt cache, and `discarded_replies`, `discarded_prompt_tokens`, `discarded_completion_tokens` the replies thrown away and sent again (structured output), where there were any (see [docs/offline.md](docs/offline.md))"},
	{Name: "finish_reason", Type: arrow.BinaryTypes.String, Doc: "finish reason of the last generation (`stop`, `length`, `tool_calls`)"},
	{Name: "terminated", Type: arrow.FixedWidthTypes.Boolean, Doc: "the environment ended the episode"},
	{Name: "truncated", Type: arrow.FixedWidthTypes.Boolean, Doc: "cut short by a length limit (context length, observation overflow)"},
	{Name: "max_turns_reached", Type: arrow.FixedWidthTypes.Boolean, Doc: "stopped at the turn limit"},
	{Name: "num_turns", Type: arrow.PrimitiveTypes.Int32, Doc: "number of generations"},
	{Name: "token_continuity_breaks", Type: arrow.PrimitiveTypes.Int32, Doc: "turns whose prompt token ids did not start with the trajectory's tokens so far"},
	{Name: "tool_calls", Type: arrow.PrimitiveTypes.Int32, Doc: "number of tool calls the model made"},
	{Name: "retries", Type: arrow.PrimitiveTypes.Int32, Doc: "times this sample was tried again on its own after failing (`groups.sample_retries`); the row holds its last try"},
	{Name: "group_reward_mean", Type: arrow.PrimitiveTypes.Float64, Doc: "mean reward of the group"},
	{Name: "group_reward_std", Type: arrow.PrimitiveTypes.Float64, Doc: "standard deviation of the group's rewards"},
	{Name: "advantage", Type: arrow.PrimitiveTypes.Float64, Doc: "the rollout's advantage inside its group"},
	{Name: "kept", Type: arrow.FixedWidthTypes.Boolean, Doc: "the group passed the keep rule"},
	{Name: "filter_reason", Type: arrow.BinaryTypes.String, Doc: "why a dropped group was dropped (`zero_std`, `mean_outside`, `error`, `over_target`); on a kept row empty, or `unfiltered:REASON` for a group the keep rule dropped on its task's last attempt and `groups.on_exhausted: keep_unfiltered` kept to fill the target"},
	{Name: "prompt_tokens", Type: arrow.PrimitiveTypes.Int64, Doc: "prompt tokens over all requests of the rollout, as the servers reported them (`usage.prompt_tokens`, summed: every turn's whole prompt counts again)"},
	{Name: "completion_tokens", Type: arrow.PrimitiveTypes.Int64, Doc: "generated tokens over all requests, as the servers reported them (`usage.completion_tokens`, summed)"},
	{Name: "env_tokens", Type: arrow.PrimitiveTypes.Int64, Nullable: true, Doc: "observation tokens in the training view: `response_token_ids` entries with `loss_mask` 0 (`total_tokens - gen_tokens`); null where the training view's counts are unknown (a reply came without token ids, [Token counts](#token-counts))"},
	{Name: "gen_tokens", Type: arrow.PrimitiveTypes.Int64, Nullable: true, Doc: "generated tokens in the training view: `response_token_ids` entries with `loss_mask` 1 (NeMo RL's per-sample assistant tokens); null where unknown (a reply came without token ids: `completion_tokens` holds the server's count)"},
	{Name: "total_tokens", Type: arrow.PrimitiveTypes.Int64, Nullable: true, Doc: "tokens of the training view without the prompt: `len(response_token_ids)` = `gen_tokens + env_tokens` (NeMo RL's per-sample total tokens); null where unknown"},
	{Name: "turn_gen_tokens", Type: ListOf(arrow.PrimitiveTypes.Int32), Doc: "tokens generated in each turn: entry `t-1` is Σ (`token_end - token_start`) over the assistant `messages` of turn `t` (0 where a turn's tokens are not in the sequence); one entry per turn, `num_turns` of them; empty where the counts are unknown (`gen_tokens` null). A light copy of what `messages` holds, so that `stats` sums NeMo RL's `total_gen_tokens_per_turn` without reading `messages`"},
	{Name: "prompt_tokens_dropped", Type: arrow.PrimitiveTypes.Int32, Doc: "ids of the prompt that `prompt.max_tokens` cut (step-wise, `env.history_length`: summed over the steps' prompts) (`prompt.truncation: left`, `right` or `middle`, [docs/prompts.md](docs/prompts.md#prompt-length-limit)); `0` when none. `prompt_token_ids` holds what was sent, `prompt_tokens_dropped` more were rendered"},
	{Name: "invalid_actions", Type: arrow.PrimitiveTypes.Int32, Doc: "steps whose action the environment marked invalid (`is_action_valid: false`, [docs/environments.md](docs/environments.md#action-validity-and-anchor-states)); each is charged `env.invalid_action_penalty` in its step row (not in `reward`). `0` when none or when the environment judges no actions"},
	{Name: "admitted_version", Type: arrow.PrimitiveTypes.Int64, Doc: "the policy version when the rollout was admitted (its first request prepared); 0 in a run without a policy (every offline run), see [Policy versions](#policy-versions)"},
	{Name: "min_policy_version", Type: arrow.PrimitiveTypes.Int64, Doc: "the oldest `version` in `policy_versions`; for a row with no span, the version its oldest answer was requested under (answers without token ids have no positions to tag), and `admitted_version` when nothing was generated"},
	{Name: "temperature", Type: arrow.PrimitiveTypes.Float64, Nullable: true, Doc: "the `temperature` the rollout's requests were sent with (the row's `params` merged under `generate.params`); null when none was sent (the server's default)"},
	{Name: "top_p", Type: arrow.PrimitiveTypes.Float64, Nullable: true, Doc: "the `top_p` sent; null when none was"},
	{Name: "top_k", Type: arrow.PrimitiveTypes.Int32, Nullable: true, Doc: "the `top_k` sent; null when none was"},
	{Name: "max_tokens", Type: arrow.PrimitiveTypes.Int32, Nullable: true, Doc: "the `max_tokens` (or `max_completion_tokens`) configured for each request, before trajflow caps a request's to the room `max_seq_len` leaves; null when none was set"},
	{Name: "gen_ms", Type: arrow.PrimitiveTypes.Float64, Doc: "time spent generating, milliseconds"},
	{Name: "env_ms", Type: arrow.PrimitiveTypes.Float64, Doc: "time spent in environment steps, milliseconds"},
	{Name: "total_ms", Type: arrow.PrimitiveTypes.Float64, Doc: "wall time from first request to resolution, milliseconds"},
	{Name: "error", Type: arrow.BinaryTypes.String, Doc: "error message when `status = error`"},
	{Name: "task", Type: arrow.BinaryTypes.String, Doc: "the input row as JSON"},
	{Name: "messages", Type: ListOf(arrow.StructOf(fields(messageFields)...)), Doc: "every message of every turn, prompt included"},
	{Name: "prompt_token_ids", Type: ListOf(arrow.PrimitiveTypes.Int32), Doc: "token ids of the initial prompt as the server reported them"},
	{Name: "response_token_ids", Type: ListOf(arrow.PrimitiveTypes.Int32), Doc: "every token after the initial prompt: generated and observation tokens, in order"},
	{Name: "loss_mask", Type: ListOf(arrow.PrimitiveTypes.Int8), Doc: "one per `response_token_ids` entry: 1 = generated by the model in exactly this context, 0 = anything else (observation tokens, chat-template tokens around them)"},
	{Name: "response_logprobs", Type: ListOf(arrow.PrimitiveTypes.Float32), Doc: "one per `response_token_ids` entry: generation logprob, 0 for tokens with `loss_mask` 0. Logprobs a server returns without token ids (Ollama's chat completions with `logprobs: true`) are not kept: with no ids they have no place in the sequence (`gen_tokens` is then null); `generate.api: tokens` or `sglang` brings both"},
	{Name: "policy_versions", Type: ListOf(versionSpanType), Doc: "the policy versions of the generated tokens: half-open spans `[start, end)` over the positions of `prompt_token_ids ++ response_token_ids` (the coordinates of `messages.token_start`), in order; `version` = `version_max` where the version is known, `version < version_max` where the weights changed while a request was in flight and the server did not say at which token; positions no span covers were not generated. See [Policy versions](#policy-versions)"},
	{Name: "segments", Type: ListOf(segmentType), Doc: "where an agent that trajflow ran (env `agent`) rewrote its history: one entry per rewrite, the index in `messages` of the new segment's first message (`message`), the position in `prompt_token_ids ++ response_token_ids` of its first token (`token`; -1 where the row holds no token ids), and the turn of its first answer (`turn`). A segment's prompt is rendered whole after the previous segment's tokens, so a trainer takes each segment's tokens as a sample of its own. Empty: one segment (every trajectory trajflow's own loop drives)."},
	{Name: "routed_experts", Type: ListOf(arrow.PrimitiveTypes.Int16), Nullable: true, Doc: "the experts a mixture-of-experts engine routed each position of `prompt_token_ids ++ response_token_ids` to (`generate.routed_experts`), for router replay: `[layers, top_k, e...]` with `layers × top_k` expert ids per position, position-major then layer-major (position `p`, layer `l`, choice `k` at `2 + (p·layers + l)·top_k + k`), over every position of the row; a position the engine never routed (an observation no later prompt carried, the last generated token) holds -1 throughout. Null: no routes (not asked for, a dense model, or an engine not started to return them). See [Routed experts](#routed-experts)", Dict: true},
}

// messageFields are the fields of a messages element, in the order of
// the Msg constants.
var messageFields = []Column{
	{Name: "role", Type: arrow.BinaryTypes.String, Doc: "`system`, `user`, `assistant` or `tool`"},
	{Name: "content", Type: arrow.BinaryTypes.String, Doc: "text (for a message with images, the texts of its `parts` joined with `\\n`)"},
	{Name: "tool_calls", Type: ListOf(toolCallType), Doc: "function calls made by an assistant message (`arguments` is the JSON string the model produced)"},
	{Name: "tool_call_id", Type: arrow.BinaryTypes.String, Doc: "for `tool` messages: the call answered"},
	{Name: "name", Type: arrow.BinaryTypes.String, Doc: "for `tool` messages: the tool's name"},
	{Name: "token_start", Type: arrow.PrimitiveTypes.Int32, Doc: "start of the message's span in the token sequence `prompt_token_ids ++ response_token_ids` (0-based)"},
	{Name: "token_end", Type: arrow.PrimitiveTypes.Int32, Doc: "end of the span (exclusive): the message's tokens are `(prompt_token_ids ++ response_token_ids)[token_start:token_end]`"},
	{Name: "turn", Type: arrow.PrimitiveTypes.Int32, Doc: "0 for the prompt, k for the k-th generation and the environment's answer to it"},
	{Name: "parts", Type: ListOf(partType), Doc: "the content parts of a message that holds an image, in order (empty for a text-only message, whose `content` is everything): `type` `text` (with `text`) or `image_url` (with `image_url`, see [Images](#images))"},
}

// stepKey is the doc of the step table's key columns.
const stepKey = "the step's trajectory: join on `traj_id` (or `task_index, attempt, rollout_index`)"

// anchorStats is the doc of anchor_return_mean and anchor_return_std.
const anchorStats = "mean and sample standard deviation of the anchor group's `step_return`s; a group of one has its own `step_return` as mean and std 1, as GiGPO's `step_norm_reward` takes them (so its `step_advantage` is 0)"

// stepColumns is the step table, in order. Consecutive columns with the
// same doc share one row of SCHEMA.md's table.
var stepColumns = []Column{
	{Name: "run_id", Type: arrow.BinaryTypes.String, Doc: stepKey},
	{Name: "task_index", Type: arrow.PrimitiveTypes.Int64, Doc: stepKey},
	{Name: "attempt", Type: arrow.PrimitiveTypes.Int32, Doc: stepKey},
	{Name: "rollout_index", Type: arrow.PrimitiveTypes.Int32, Doc: stepKey},
	{Name: "group_id", Type: arrow.BinaryTypes.String, Doc: stepKey},
	{Name: "traj_id", Type: arrow.BinaryTypes.String, Doc: stepKey},
	{Name: "step", Type: arrow.PrimitiveTypes.Int32, Doc: "the step's number in its trajectory, 1..`num_turns`"},
	{Name: "step_reward", Type: arrow.PrimitiveTypes.Float64, Doc: "the step's reward as the environment gave it: `turn_rewards[step]` (no penalty)"},
	{Name: "episode_reward", Type: arrow.PrimitiveTypes.Float64, Doc: "the trajectory's `reward`"},
	{Name: "episode_length", Type: arrow.PrimitiveTypes.Int32, Doc: "the trajectory's `num_turns`"},
	{Name: "is_action_valid", Type: arrow.FixedWidthTypes.Boolean, Doc: "false when the environment marked the action invalid"},
	{Name: "anchor_obs", Type: arrow.BinaryTypes.String, Nullable: true, Doc: "the anchor observation of the state the action was taken at; null when the environment gave none"},
	{Name: "anchor_group_id", Type: arrow.BinaryTypes.String, Nullable: true, Doc: "`GROUP_ID/aN`: steps of one group with equal `anchor_obs` share it (JSON anchors compared as values: object keys in any order, `1` and `1.0` alike, as GiGPO's `to_hashable`; other text as text); null with `anchor_obs`"},
	{Name: "anchor_group_size", Type: arrow.PrimitiveTypes.Int32, Doc: "the number of steps in the anchor group (1 without an anchor)"},
	{Name: "anchor_return_mean", Type: arrow.PrimitiveTypes.Float64, Doc: anchorStats},
	{Name: "anchor_return_std", Type: arrow.PrimitiveTypes.Float64, Doc: anchorStats},
	{Name: "step_return", Type: arrow.PrimitiveTypes.Float64, Doc: "the discounted return of the step rewards from this step on (`G = step_reward + groups.gamma × G_next`), less `env.invalid_action_penalty` when the action was invalid: verl-agent's `step_rewards` after `apply_invalid_action_penalty`, which charges the penalty after the returns are computed (so it is not discounted into earlier steps)"},
	{Name: "step_advantage", Type: arrow.PrimitiveTypes.Float64, Doc: "GiGPO's step-level advantage: `step_return − anchor_return_mean` (`groups.step_advantage: mean_norm`, the default) or that divided by `anchor_return_std + 1e-6` (`mean_std_norm`); 0 for a step alone in its anchor group"},
	{Name: "episode_advantage", Type: arrow.PrimitiveTypes.Float64, Doc: "GiGPO's episode-level advantage of the step: its episode score (`episode_reward`, less the penalty when the action was invalid) less the mean of the scores of every step of the group (`mean_norm`), or that divided by their sample standard deviation + 1e-6 (`mean_std_norm`); mean 0 and std 1 when the group has one step in all (verl-agent's `episode_norm_reward`, mean and std across steps)"},
	{Name: "joint_advantage", Type: arrow.PrimitiveTypes.Float64, Doc: "the advantage GiGPO trains the step on: `episode_advantage + groups.step_advantage_w × step_advantage` (default weight 1)"},
	{Name: "raw_prompt", Type: arrow.BinaryTypes.String, Nullable: true, Doc: "step-wise (`env.history_length`): the step's request as text, a JSON list of `{\"role\", \"content\"}` (verl-agent's `raw_prompt` with `data.return_raw_chat`; images are not in it); null with whole-chat requests, whose text is the trajectory's `messages` up to the step"},
	{Name: "prompt_token_ids", Type: ListOf(arrow.PrimitiveTypes.Int32), Doc: "the step's request prompt, as the server tokenized it (chat: the response's `prompt_token_ids`, so set `generate.params.return_token_ids: true`) or as trajflow sent it (`generate.api: tokens`)"},
	{Name: "response_token_ids", Type: ListOf(arrow.PrimitiveTypes.Int32), Doc: "the tokens generated in this step"},
	{Name: "loss_mask", Type: ListOf(arrow.PrimitiveTypes.Int8), Doc: "all 1: every response token was generated in exactly this context"},
	{Name: "response_logprobs", Type: ListOf(arrow.PrimitiveTypes.Float32), Doc: "the generation logprobs (0 where the server sent none)"},
}
