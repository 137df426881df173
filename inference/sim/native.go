package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// nativeRequest is the part of SGLang's GenerateReqInput the simulator
// reads (python/sglang/srt/managers/io_struct.py at SGLang revision
// 001067fffe33427bee0ed2f007fb7551a1d76b44): one prompt of token ids.
type nativeRequest struct {
	RID            json.RawMessage `json:"rid"`
	Text           json.RawMessage `json:"text"`
	InputIDs       json.RawMessage `json:"input_ids"`
	SamplingParams json.RawMessage `json:"sampling_params"`
	ReturnLogprob  *bool           `json:"return_logprob"`
	Stream         bool            `json:"stream"`
	Priority       *int64          `json:"priority"`
	// ReturnRoutedExperts asks a MoE model (Options.MoE) for its routes.
	ReturnRoutedExperts bool `json:"return_routed_experts"`
}

// nativeParams turns SGLang sampling_params into the simulator's OpenAI
// request params: max_new_tokens is max_tokens, sampling_seed is seed, the
// rest (temperature, top_p, stop, ...) is kept as it is.
func nativeParams(raw json.RawMessage) (map[string]any, error) {
	params := map[string]any{}
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return params, nil
	}
	var sp map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&sp); err != nil {
		return nil, fmt.Errorf("sampling_params: want an object: %v", err)
	}
	for k, v := range sp {
		switch k {
		case "max_new_tokens":
			if v == nil {
				continue
			}
			k = "max_tokens"
		case "sampling_seed":
			k = "seed"
		case "n":
			if n, ok := toInt(v); !ok || n != 1 {
				return nil, fmt.Errorf("sampling_params.n: only n=1 is supported, got %v", v)
			}
		}
		params[k] = v
	}
	return params, nil
}

// nativeAPI serves SGLang's native POST /generate for one prompt of
// token ids: {"input_ids": [...], "sampling_params": {...},
// "return_logprob", "rid", "priority"} → {"text", "output_ids",
// "meta_info": {"id", "finish_reason": {"type": ...}, "prompt_tokens",
// "completion_tokens", "cached_tokens", "output_token_logprobs" (with
// return_logprob)}, "sim_trailer"}. A text prompt, a batch of prompts and
// streaming are refused with a 400 (trajflow sends none); priority
// orders the schedule as on the OpenAI APIs (the waiting queue, and
// preemption under a full batch). The serving around it is the Server's
// (handle, answer), as for the OpenAI APIs: faults (Options.Faults) are
// drawn as for them. An aborted request (POST /abort_request, by the
// request's rid) answers with the tokens it generated and finish_reason
// {"type": "abort"}. SGLang's errors are {"error": {"message"}} bodies, as
// writeError writes them.
func nativeAPI(s *Server, body []byte) (*exchange, error) {
	var req nativeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, errors.New("invalid JSON body: " + err.Error())
	}
	ids, err := nativeInputIDs(req)
	if err != nil {
		return nil, err
	}
	params, err := nativeParams(req.SamplingParams)
	if err != nil {
		return nil, err
	}
	in, err := s.tokenInput(ids, params)
	if err != nil {
		return nil, err
	}
	rid := ""
	if len(req.RID) > 0 {
		_ = json.Unmarshal(req.RID, &rid) // best effort: nativeInputIDs checked it is a string
	}
	priority := 0
	if req.Priority != nil {
		priority = int(*req.Priority)
	}
	return &exchange{in: in, priority: priority, rid: rid, answer: func(rep *reply) any {
		out := s.nativeResponse(in, rep, rid, req.ReturnLogprob != nil && *req.ReturnLogprob)
		if moe := s.opts.MoE; moe.On() && req.ReturnRoutedExperts {
			out["meta_info"].(map[string]any)["routed_experts"] = EncodeSGLangRoutes(moe.Routes(int64(s.seed), slices.Concat(in.promptIDs, rep.ids)))
		}
		return out
	}}, nil
}

// nativeResponse is /generate's answer: rid names the request (the
// sampling key's when it named none).
func (s *Server) nativeResponse(in *input, rep *reply, rid string, logprobs bool) map[string]any {
	if rid == "" {
		rid = fmt.Sprintf("%016x", key(s.seed, in.promptKey, in.sampleKey, uint64(in.turn)))
	}
	finish := map[string]any{"type": rep.finish}
	switch rep.finish {
	case "length":
		finish["length"] = len(rep.ids)
	case "abort":
		finish["message"] = "Abort request " + rid
	}
	meta := map[string]any{
		"id":                rid,
		"finish_reason":     finish,
		"prompt_tokens":     len(in.promptIDs),
		"completion_tokens": len(rep.ids),
		"cached_tokens":     0,
	}
	if logprobs {
		lps := make([][]any, len(rep.ids))
		for i, id := range rep.ids {
			lps[i] = []any{rep.logprobs[i], id, nil}
		}
		meta["output_token_logprobs"] = lps
	}
	return map[string]any{"text": rep.text, "output_ids": rep.ids, "meta_info": meta, "sim_trailer": rep.trailer}
}

// nativeInputIDs checks a /generate request and returns its prompt's ids.
func nativeInputIDs(req nativeRequest) ([]int32, error) {
	if req.Stream {
		return nil, errors.New("stream: streaming is not supported by the simulator")
	}
	if t := bytes.TrimSpace(req.Text); len(t) > 0 && string(t) != "null" {
		return nil, errors.New("text: the simulator's /generate takes input_ids only")
	}
	if len(req.RID) > 0 && string(bytes.TrimSpace(req.RID)) != "null" {
		var rid string
		if err := json.Unmarshal(req.RID, &rid); err != nil {
			return nil, errors.New("rid: want one string (one prompt a request)")
		}
	}
	var ids []int32
	if err := json.Unmarshal(req.InputIDs, &ids); err != nil || len(ids) == 0 {
		return nil, errors.New("input_ids: want one non-empty list of token ids (one prompt a request)")
	}
	for i, id := range ids {
		if id < 0 {
			return nil, fmt.Errorf("input_ids[%d]: %d is negative", i, id)
		}
	}
	return ids, nil
}

// ridKey is the context key of a /generate request's rid.
type ridKey struct{}

// withRID returns ctx carrying rid, which run records with the request's
// job for AbortRID.
func withRID(ctx context.Context, rid string) context.Context {
	return context.WithValue(ctx, ridKey{}, rid)
}

func ridOf(ctx context.Context) string {
	rid, _ := ctx.Value(ridKey{}).(string)
	return rid
}

// AbortRID cuts the requests in the server whose rid is rid short, as
// SGLang's POST /abort_request {"rid": rid} does: each answers as AbortAll
// makes it. It returns the number of requests aborted (0 for an rid the
// server does not hold, which SGLang ignores too).
func (s *Server) AbortRID(rid string) int {
	if rid == "" {
		return 0
	}
	return s.abortWhere(func(r string) bool { return r == rid })
}
