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

// TemplateParams are the request parameters that shape the chat
// template's rendering rather than the generation: vLLM's and SGLang's
// chat completions take them, and so does their POST /tokenize.
// chat_template_kwargs are extra variables of the template (Qwen3's
// enable_thinking), chat_template replaces the server's template, and
// add_special_tokens adds the tokenizer's special tokens (a BOS) on top of
// the template's.
var TemplateParams = []string{"chat_template", "chat_template_kwargs", "add_special_tokens"}

// TemplateArgs returns the TemplateParams that params holds (copied), nil
// when it holds none: what a /tokenize call must send to render a prompt
// as a chat request with params would be rendered.
func TemplateArgs(params map[string]any) map[string]any {
	var out map[string]any
	for _, k := range TemplateParams {
		if v, ok := params[k]; ok {
			if out == nil {
				out = map[string]any{}
			}
			out[k] = copyValue(v)
		}
	}
	return out
}
