package schema

import "github.com/apache/arrow/go/v17/arrow"

// VersionV6 is the sixth schema version: the current one less
// routed_experts (a version 6 file holds no routes: its rows' Routes are
// nil). Its other columns have the same names, types, nullability and
// order as the current version's.
const VersionV6 = "6"

// v6Schema is version 6's Arrow schema, frozen: it never follows changes
// to the current schema.
var v6Schema = func() *arrow.Schema {
	str, i32, i64, f64 := arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float64
	bl := arrow.FixedWidthTypes.Boolean
	f := field
	nf := func(name string, t arrow.DataType) arrow.Field {
		return arrow.Field{Name: name, Type: t, Nullable: true}
	}
	tool := arrow.StructOf(f("id", str), f("type", str), f("name", str), f("arguments", str))
	part := arrow.StructOf(f("type", str), f("text", str), f("image_url", str))
	msg := arrow.StructOf(f("role", str), f("content", str), f("tool_calls", ListOf(tool)),
		f("tool_call_id", str), f("name", str), f("token_start", i32), f("token_end", i32), f("turn", i32),
		f("parts", ListOf(part)))
	metric := arrow.StructOf(f("name", str), f("value", f64))
	span := arrow.StructOf(f("version", i64), f("version_max", i64), f("start", i32), f("end", i32))
	seg := arrow.StructOf(f("message", i32), f("token", i32), f("turn", i32))
	return arrow.NewSchema([]arrow.Field{
		f("run_id", str), f("task_index", i64), f("attempt", i32), f("rollout_index", i32),
		f("group_id", str), f("traj_id", str), f("seed", i64), f("group_size", i32),
		f("env", str), f("model", str), f("status", str), f("error_class", str),
		f("reward", f64), f("turn_rewards", ListOf(f64)), f("metrics", ListOf(metric)),
		f("finish_reason", str), f("terminated", bl), f("truncated", bl), f("max_turns_reached", bl),
		f("num_turns", i32), f("token_continuity_breaks", i32), f("tool_calls", i32), f("retries", i32),
		f("group_reward_mean", f64), f("group_reward_std", f64), f("advantage", f64),
		f("kept", bl), f("filter_reason", str),
		f("prompt_tokens", i64), f("completion_tokens", i64), nf("env_tokens", i64),
		nf("gen_tokens", i64), nf("total_tokens", i64), f("turn_gen_tokens", ListOf(i32)),
		f("prompt_tokens_dropped", i32), f("invalid_actions", i32),
		f("admitted_version", i64), f("min_policy_version", i64),
		nf("temperature", f64), nf("top_p", f64), nf("top_k", i32), nf("max_tokens", i32),
		f("gen_ms", f64), f("env_ms", f64), f("total_ms", f64),
		f("error", str), f("task", str), f("messages", ListOf(msg)),
		f("prompt_token_ids", ListOf(i32)), f("response_token_ids", ListOf(i32)),
		f("loss_mask", ListOf(arrow.PrimitiveTypes.Int8)), f("response_logprobs", ListOf(arrow.PrimitiveTypes.Float32)),
		f("policy_versions", ListOf(span)), f("segments", ListOf(seg)),
	}, nil)
}()
