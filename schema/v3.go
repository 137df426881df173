package schema

import "github.com/apache/arrow/go/v17/arrow"

// VersionV3 is the third schema version: the current one less
// policy_versions, admitted_version, min_policy_version, temperature,
// top_p, top_k, max_tokens, segments and routed_experts. Its light columns are the current
// version's less these, with the same names and types.
const VersionV3 = "3"

// v3Schema is version 3's Arrow schema, frozen: it never follows changes
// to the current schema.
var v3Schema = func() *arrow.Schema {
	str, i32, i64, f64 := arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float64
	bl := arrow.FixedWidthTypes.Boolean
	f := field
	tool := arrow.StructOf(f("id", str), f("type", str), f("name", str), f("arguments", str))
	part := arrow.StructOf(f("type", str), f("text", str), f("image_url", str))
	msg := arrow.StructOf(f("role", str), f("content", str), f("tool_calls", ListOf(tool)),
		f("tool_call_id", str), f("name", str), f("token_start", i32), f("token_end", i32), f("turn", i32),
		f("parts", ListOf(part)))
	metric := arrow.StructOf(f("name", str), f("value", f64))
	return arrow.NewSchema([]arrow.Field{
		f("run_id", str), f("task_index", i64), f("attempt", i32), f("rollout_index", i32),
		f("group_id", str), f("traj_id", str), f("seed", i64), f("group_size", i32),
		f("env", str), f("model", str), f("status", str), f("error_class", str),
		f("reward", f64), f("turn_rewards", ListOf(f64)), f("metrics", ListOf(metric)),
		f("finish_reason", str), f("terminated", bl), f("truncated", bl), f("max_turns_reached", bl),
		f("num_turns", i32), f("token_continuity_breaks", i32), f("tool_calls", i32), f("retries", i32),
		f("group_reward_mean", f64), f("group_reward_std", f64), f("advantage", f64),
		f("kept", bl), f("filter_reason", str),
		f("prompt_tokens", i64), f("completion_tokens", i64), f("env_tokens", i64),
		f("gen_tokens", i64), f("total_tokens", i64), f("turn_gen_tokens", ListOf(i32)),
		f("prompt_tokens_dropped", i32), f("invalid_actions", i32),
		f("gen_ms", f64), f("env_ms", f64), f("total_ms", f64),
		f("error", str), f("task", str), f("messages", ListOf(msg)),
		f("prompt_token_ids", ListOf(i32)), f("response_token_ids", ListOf(i32)),
		f("loss_mask", ListOf(arrow.PrimitiveTypes.Int8)), f("response_logprobs", ListOf(arrow.PrimitiveTypes.Float32)),
	}, nil)
}()
