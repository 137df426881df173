package nemogym

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// Keys of a Gym row (nemo_gym/global_config.py).
const (
	ParamsKey       = "responses_create_params"
	ResponseKey     = "response"
	TaskIndexKey    = "_ng_task_index"
	RolloutIndexKey = "_ng_rollout_index"
	AgentRefKey     = "agent_ref"
	RewardKey       = "reward"
)

// Fields returns the task's input row as a new map; numbers are
// json.Number, so they are written back exactly as read.
func Fields(t *pipeline.Task) (map[string]any, error) {
	if t == nil {
		return nil, fmt.Errorf("no task")
	}
	if len(t.Raw) == 0 {
		if t.Fields == nil {
			return map[string]any{}, nil
		}
		return maps.Clone(t.Fields), nil
	}
	var fields map[string]any
	dec := json.NewDecoder(bytes.NewReader(t.Raw))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return nil, fmt.Errorf("task %s is not a JSON object", t.Source)
	}
	return fields, nil
}

// CreateParams returns the responses_create_params of a row: the row's own
// object, unchanged (string input stays a string, instructions stay
// instructions), as Gym's agent sends it. A row without one (a plain row
// whose prompt trajflow rendered) gets one built from the rendered prompt
// (the turn-0 messages, as input items), the task's tools (Responses
// shape) and the task's request parameters.
func CreateParams(fields map[string]any, r *pipeline.Rollout) map[string]any {
	if rcp, ok := fields[ParamsKey].(map[string]any); ok {
		return rcp
	}
	rcp := map[string]any{}
	if r.Task != nil {
		for k, v := range r.Task.Params {
			rcp[k] = v
		}
		if tools := responsesTools(r.Task.Tools); len(tools) > 0 {
			rcp["tools"] = tools
		}
	}
	input := []any{}
	for _, m := range r.Messages {
		if m.Turn != 0 {
			break
		}
		input = append(input, inputItems(m)...)
	}
	rcp["input"] = input
	return rcp
}

// Request returns what Gym's rollout collection posts for one rollout (to
// its agent, and the agent on to /seed_session and, with the response, to
// /verify): the row's fields, its responses_create_params (CreateParams)
// with the config's request parameters laid over them and the rollout's
// seed with repeat.add_seed (Overridden), agent_ref (the row's, or the
// rollout's environment route as {"name": ROUTE} for a row without one),
// _ng_task_index and _ng_rollout_index.
func Request(r *pipeline.Rollout) (map[string]any, error) {
	fields, err := Fields(r.Task)
	if err != nil {
		return nil, err
	}
	var seed *int64
	if r.GymSeed {
		seed = &r.Seed
	}
	fields[ParamsKey] = Overridden(CreateParams(fields, r), r.ConfigParams, seed)
	if _, ok := fields[AgentRefKey]; !ok && r.Env != "" {
		// Gym gives a row without agent_ref the run's agent (agent_name);
		// trajflow's is the rollout's environment route.
		fields[AgentRefKey] = map[string]any{"name": r.Env}
	}
	fields[TaskIndexKey] = r.Task.Index
	fields[RolloutIndexKey] = r.RolloutIndex
	return fields, nil
}

// Overridden returns rcp laid under the config's request parameters, as
// Gym's rollout collection merges its responses_create_params overrides
// into every row (row | overrides: shallow, an override replaces the
// row's key), then, when seed is not nil, with the seed in
// metadata.extra_body (a JSON string: {"seed": N} merged into the
// extra_body already there). Gym's num_repeats_add_seed writes it at the
// top level instead, which newer Gym's responses_create_params forbid. The parameters are
// written in the Responses API's names: max_tokens and
// max_completion_tokens as max_output_tokens, reasoning_effort as
// reasoning.effort. rcp is not changed; the result is a new map.
func Overridden(rcp, params map[string]any, seed *int64) map[string]any {
	out := make(map[string]any, len(rcp)+len(params)+1)
	maps.Copy(out, rcp)
	for k, v := range params {
		switch k {
		case "max_tokens", "max_completion_tokens":
			if k == "max_completion_tokens" {
				if _, both := params["max_tokens"]; both {
					continue
				}
			}
			out["max_output_tokens"] = v
		case "reasoning_effort":
			r := map[string]any{}
			if old, ok := out["reasoning"].(map[string]any); ok {
				maps.Copy(r, old)
			}
			r["effort"] = v
			out["reasoning"] = r
		default:
			out[k] = v
		}
	}
	if seed != nil {
		out["metadata"] = seedMetadata(out["metadata"], *seed)
	}
	return out
}

// seedMetadata returns a copy of the metadata md with "seed" set in its
// extra_body, as Gym's rollout collection does with num_repeats_add_seed:
// extra_body is a JSON object in a string (metadata's values are
// strings); one that is not an object is replaced.
func seedMetadata(md any, seed int64) map[string]any {
	out := map[string]any{}
	if m, ok := md.(map[string]any); ok {
		maps.Copy(out, m)
	}
	extra := map[string]any{}
	if s, ok := out["extra_body"].(string); ok {
		dec := json.NewDecoder(strings.NewReader(s))
		dec.UseNumber()
		if err := dec.Decode(&extra); err != nil || extra == nil {
			extra = map[string]any{}
		}
	}
	extra["seed"] = seed
	b, _ := json.Marshal(extra) // numbers, strings and decoded JSON: always encodable
	out["extra_body"] = string(b)
	return out
}

// responseCopied are the create params a Gym response repeats
// (responses_converter.py, chat_completion_to_response).
var responseCopied = []string{
	"temperature", "top_p", "background", "max_output_tokens", "max_tool_calls",
	"previous_response_id", "prompt", "reasoning", "service_tier", "text",
	"top_logprobs", "truncation", "metadata", "instructions", "user",
}

// Response builds the Responses API response of a rollout: output holds
// the messages after the prompt (Output), usage the rollout's token counts
// summed over its turns (as Gym's agent accumulates them), and status is
// "incomplete" with incomplete_details when the last reply was cut
// (finish_reason length or content_filter). msgs are the messages to
// convert (nil: r.Messages); rcp is the request's create params.
func Response(r *pipeline.Rollout, msgs []pipeline.Message, rcp map[string]any, now time.Time) map[string]any {
	if msgs == nil {
		msgs = r.Messages
	}
	model := any(r.Model)
	if m, ok := rcp["model"]; ok && m != nil {
		model = m
	}
	toolChoice := rcp["tool_choice"]
	if toolChoice == nil {
		toolChoice = "auto"
	}
	parallel := rcp["parallel_tool_calls"]
	if parallel == nil {
		parallel = true
	}
	tools := rcp["tools"]
	if tools == nil {
		tools = []any{}
	}
	resp := map[string]any{
		"id":                  "resp_" + r.TrajID,
		"object":              "response",
		"created_at":          now.Unix(),
		"model":               model,
		"output":              Output(msgs),
		"tool_choice":         toolChoice,
		"parallel_tool_calls": parallel,
		"tools":               tools,
		"status":              "completed",
		"incomplete_details":  nil,
		"usage":               Usage(r),
	}
	if d := IncompleteDetails(r.FinishReason); d != nil {
		resp["status"] = "incomplete"
		resp["incomplete_details"] = d
	}
	for _, k := range responseCopied {
		if v, ok := rcp[k]; ok {
			resp[k] = v
		}
	}
	return resp
}

// IncompleteDetails is Gym's incomplete_details for a finish reason: a
// reply cut by max tokens is {"reason": "max_output_tokens"}, one stopped
// by a content filter {"reason": "content_filter"}; nil otherwise.
func IncompleteDetails(finishReason string) map[string]any {
	switch finishReason {
	case "length":
		return map[string]any{"reason": "max_output_tokens"}
	case "content_filter":
		return map[string]any{"reason": "content_filter"}
	}
	return nil
}

// Usage is the Responses API usage of a rollout, summed over its turns.
// trajflow does not know cached or reasoning token counts: both are null,
// as Gym writes them when the server does not report them.
func Usage(r *pipeline.Rollout) map[string]any {
	return map[string]any{
		"input_tokens":          r.PromptTokens,
		"input_tokens_details":  map[string]any{"cached_tokens": nil},
		"output_tokens":         r.CompletionTokens,
		"output_tokens_details": map[string]any{"reasoning_tokens": nil},
		"total_tokens":          r.PromptTokens + r.CompletionTokens,
	}
}

// Output converts the messages after the prompt (Turn > 0) to Responses
// API output items, in order.
func Output(msgs []pipeline.Message) []any {
	out := []any{}
	for i, m := range msgs {
		if m.Turn == 0 {
			continue
		}
		out = append(out, outputItems(m, i)...)
	}
	return out
}

// outputItems converts one message after the prompt: an assistant message
// to a reasoning item (its <think> text), a message item (its text; also
// when the message has nothing else) and one function_call per tool call,
// as Gym's converter does (postprocess_assistant_message_dict); a tool
// message to a function_call_output; any other to an input message.
func outputItems(m pipeline.Message, i int) []any {
	switch m.Role {
	case pipeline.RoleTool:
		return []any{map[string]any{"type": "function_call_output", "call_id": m.ToolCallID, "output": m.Content, "status": "completed"}}
	case pipeline.RoleAssistant:
		var out []any
		reasoning, text := SplitThink(m.Content)
		if len(reasoning) > 0 {
			summary := make([]any, len(reasoning))
			for k, s := range reasoning {
				summary[k] = map[string]any{"type": "summary_text", "text": s}
			}
			out = append(out, map[string]any{"id": fmt.Sprintf("rs_%d", i), "type": "reasoning", "summary": summary})
		}
		if text != "" || (len(out) == 0 && len(m.ToolCalls) == 0) {
			out = append(out, map[string]any{
				"id": fmt.Sprintf("msg_%d", i), "type": "message", "role": "assistant", "status": "completed",
				"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}},
			})
		}
		for _, tc := range m.ToolCalls {
			out = append(out, map[string]any{
				"type": "function_call", "id": tc.ID, "call_id": tc.ID,
				"name": tc.Name, "arguments": tc.Arguments, "status": "completed",
			})
		}
		return out
	default:
		return []any{map[string]any{"type": "message", "role": m.Role, "content": messageContent(&m)}}
	}
}

// messageContent is a message item's content: its text, or for a message
// with images its parts as Responses API input parts (input_text, and
// input_image with image_url: the URL, or the "sha256:HEX" reference of
// output.images: reference).
func messageContent(m *pipeline.Message) any {
	if len(m.Parts) == 0 {
		return m.Content
	}
	parts := make([]any, len(m.Parts))
	for i, p := range m.Parts {
		if p.Type == pipeline.PartImage {
			parts[i] = map[string]any{"type": "input_image", "image_url": p.ImageURL, "detail": "auto"}
		} else {
			parts[i] = map[string]any{"type": "input_text", "text": p.Text}
		}
	}
	return parts
}

// inputItems converts a prompt message to Responses API input items (Gym's
// chat_completions_messages_to_responses_items): assistant tool calls
// become function_call items, tool answers function_call_output items.
func inputItems(m pipeline.Message) []any {
	switch {
	case m.Role == pipeline.RoleTool:
		return []any{map[string]any{"type": "function_call_output", "call_id": m.ToolCallID, "output": m.Content}}
	case m.Role == pipeline.RoleAssistant && len(m.ToolCalls) > 0:
		var out []any
		if m.Content != "" {
			out = append(out, map[string]any{"type": "message", "role": m.Role, "content": m.Content})
		}
		for _, tc := range m.ToolCalls {
			out = append(out, map[string]any{"type": "function_call", "call_id": tc.ID, "name": tc.Name, "arguments": tc.Arguments})
		}
		return out
	default:
		return []any{map[string]any{"type": "message", "role": m.Role, "content": messageContent(&m)}}
	}
}

// responsesTools converts chat completions tools ({type, function: {...}})
// to Responses API function tools ({type: function, name, ...}), as Gym's
// converter does (_chat_completion_to_responses_tools).
func responsesTools(tools []json.RawMessage) []any {
	var out []any
	for _, raw := range tools {
		var t map[string]any
		if json.Unmarshal(raw, &t) != nil {
			continue
		}
		if fn, ok := t["function"].(map[string]any); ok {
			t = maps.Clone(fn)
			t["type"] = "function"
		}
		out = append(out, t)
	}
	return out
}

var thinkTag = regexp.MustCompile(`(?s)<think>(.*?)</think>`)

// SplitThink splits a reply into its reasoning (the text of each
// <think>...</think> block, in order) and the rest, with the blocks
// removed: Gym's _parse_think_tags (responses_converter.py). An unclosed
// <think> stays in the text.
func SplitThink(content string) (reasoning []string, rest string) {
	if !strings.Contains(content, "<think>") {
		return nil, content
	}
	for _, m := range thinkTag.FindAllStringSubmatch(content, -1) {
		reasoning = append(reasoning, m[1])
	}
	return reasoning, thinkTag.ReplaceAllLiteralString(content, "")
}

// CheckTools reports the first tool of a responses_create_params that Gym
// would refuse: NeMoGymResponseCreateParamsNonStreaming validates tools
// with OpenAI's FunctionToolParam, whose name, parameters (null allowed)
// and strict (null allowed) are required.
func CheckTools(rcp map[string]any) error {
	v, ok := rcp["tools"]
	if !ok || v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		return fmt.Errorf("%s.tools: want a list, got %s", ParamsKey, pipeline.JSONKind(v))
	}
	for i, t := range list {
		m, ok := t.(map[string]any)
		if !ok {
			return fmt.Errorf("%s.tools[%d]: want an object, got %s", ParamsKey, i, pipeline.JSONKind(t))
		}
		if m["type"] != "function" {
			continue
		}
		for _, k := range []string{"name", "parameters", "strict"} {
			if _, ok := m[k]; !ok {
				return fmt.Errorf("%s.tools[%d]: a function tool needs %q (NeMo Gym's FunctionToolParam requires name, parameters and strict)", ParamsKey, i, k)
			}
		}
	}
	return nil
}
