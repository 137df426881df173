package inference

// MergeParams merges request parameters with NeMo Gym's semantics
// (`row | overrides`, a shallow merge): the row's values, then the
// config's on top, key by key at the top level. A config key replaces the
// row's whole value, a map included (extra_body: {top_k: 50} drops the
// row's extra_body.min_p). The result is a new map; neither input is
// modified, and maps and slices from either input are copied, not shared.
func MergeParams(row, cfg map[string]any) map[string]any {
	out := make(map[string]any, len(row)+len(cfg))
	for k, v := range row {
		out[k] = copyValue(v)
	}
	for k, v := range cfg {
		out[k] = copyValue(v)
	}
	return out
}

// copyValue copies maps and slices so the merged result shares no mutable
// structure with its inputs.
func copyValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = copyValue(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = copyValue(e)
		}
		return s
	default:
		return v
	}
}
