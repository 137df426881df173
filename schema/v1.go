package schema

import (
	"fmt"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
)

// MetadataKey is the key-value metadata key holding a file's schema
// version.
const MetadataKey = "trajflow.schema_version"

// VersionV1 is the first schema version: every message kept a copy of its
// token ids and logprobs (messages.token_ids, messages.logprobs), and
// gen_tokens, total_tokens, turn_gen_tokens, prompt_tokens_dropped and
// invalid_actions did not exist. Its light columns are those of the current version less
// these, with the same
// names and types, so readers of light columns read both.
const VersionV1 = "1"

// v1Schema is version 1's Arrow schema, frozen: it never follows changes
// to the current schema.
var v1Schema = func() *arrow.Schema {
	list := func(t arrow.DataType) arrow.DataType {
		return arrow.ListOfField(arrow.Field{Name: "element", Type: t})
	}
	str, i32, i64, f64 := arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float64
	bl := arrow.FixedWidthTypes.Boolean
	f := func(name string, t arrow.DataType) arrow.Field { return arrow.Field{Name: name, Type: t} }
	tool := arrow.StructOf(f("id", str), f("type", str), f("name", str), f("arguments", str))
	msg := arrow.StructOf(f("role", str), f("content", str), f("tool_calls", list(tool)),
		f("tool_call_id", str), f("name", str), f("token_ids", list(i32)),
		f("logprobs", list(arrow.PrimitiveTypes.Float32)), f("turn", i32))
	metric := arrow.StructOf(f("name", str), f("value", f64))
	return arrow.NewSchema([]arrow.Field{
		f("run_id", str), f("task_index", i64), f("attempt", i32), f("rollout_index", i32),
		f("group_id", str), f("traj_id", str), f("seed", i64), f("group_size", i32),
		f("env", str), f("model", str), f("status", str), f("error_class", str),
		f("reward", f64), f("turn_rewards", list(f64)), f("metrics", list(metric)),
		f("finish_reason", str), f("terminated", bl), f("truncated", bl), f("max_turns_reached", bl),
		f("num_turns", i32), f("token_continuity_breaks", i32), f("tool_calls", i32), f("retries", i32),
		f("group_reward_mean", f64), f("group_reward_std", f64), f("advantage", f64),
		f("kept", bl), f("filter_reason", str),
		f("prompt_tokens", i64), f("completion_tokens", i64), f("env_tokens", i64),
		f("gen_ms", f64), f("env_ms", f64), f("total_ms", f64),
		f("error", str), f("task", str), f("messages", list(msg)),
		f("prompt_token_ids", list(i32)), f("response_token_ids", list(i32)),
		f("loss_mask", list(arrow.PrimitiveTypes.Int8)), f("response_logprobs", list(arrow.PrimitiveTypes.Float32)),
	}, nil)
}()

// Versions returns the schema versions this package reads, oldest first.
// Only the last, Version, is written.
func Versions() []string {
	return []string{VersionV1, VersionV2, VersionV3, VersionV4, VersionV5, VersionV6, Version}
}

// ForVersion returns the Arrow schema of version v, or nil for a version
// this package does not know.
func ForVersion(v string) *arrow.Schema {
	switch v {
	case Version:
		return arrowSchema
	case VersionV1:
		return v1Schema
	case VersionV2:
		return v2Schema
	case VersionV3:
		return v3Schema
	case VersionV4:
		return v4Schema
	case VersionV5:
		return v5Schema
	case VersionV6:
		return v6Schema
	}
	return nil
}

// CheckVersion reports whether s is the schema of version v, naming the
// first column that differs.
func CheckVersion(s *arrow.Schema, v string) error {
	want := ForVersion(v)
	if want == nil {
		return fmt.Errorf("schema version %q is unknown (this trajflow reads versions %s)", v, strings.Join(Versions(), ", "))
	}
	return check(s, want, v)
}

// FileVersion returns the schema version of a file with key-value
// metadata meta and Arrow schema s: the version meta records under
// MetadataKey, checked against s, or, for a file that records none, the
// version whose schema s is. The error says which version was expected
// and the first column that differs.
func FileVersion(meta map[string]string, s *arrow.Schema) (string, error) {
	if v, ok := meta[MetadataKey]; ok {
		if err := CheckVersion(s, v); err != nil {
			return "", err
		}
		return v, nil
	}
	err := Check(s)
	if err == nil {
		return Version, nil
	}
	for _, v := range []string{VersionV6, VersionV5, VersionV4, VersionV3, VersionV2, VersionV1} {
		if v == VersionV5 && requiredCounts(s) {
			continue // version 4: 5 and 4 differ only there
		}
		if CheckVersion(s, v) == nil {
			return v, nil
		}
	}
	return "", err
}

// requiredCounts reports whether s has a required (non-nullable)
// gen_tokens column: a file of version 4 that records no version (version
// 5 and 4 differ only there).
func requiredCounts(s *arrow.Schema) bool {
	idx := s.FieldIndices("gen_tokens")
	return len(idx) == 1 && !s.Field(idx[0]).Nullable
}
