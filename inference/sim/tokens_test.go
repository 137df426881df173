package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

func TestTemplateStripReasoning(t *testing.T) {
	msgs := []pipeline.Message{
		{Role: "user", Content: "q"},
		{Role: "assistant", Content: "<think>long thought</think>\n\nfirst"},
		{Role: "user", Content: "more"},
		{Role: "assistant", Content: "<think>t2</think>\nsecond"},
	}
	tests := []struct {
		name  string
		tmpl  Template
		wants []string // message texts as rendered
	}{
		{"keep", Template{}, []string{"q", "<think>long thought</think>\n\nfirst", "more", "<think>t2</think>\nsecond"}},
		{"strip earlier only", Template{StripReasoning: true}, []string{"q", "first", "more", "<think>t2</think>\nsecond"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := parseRendered(tt.tmpl.Render(msgs, nil, true))
			if len(got) != len(tt.wants) {
				t.Fatalf("got %d messages", len(got))
			}
			for i, m := range got {
				if m.Content != tt.wants[i] || m.Role != msgs[i].Role {
					t.Errorf("message %d: %s %q, want %q", i, m.Role, m.Content, tt.wants[i])
				}
			}
		})
	}
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"f"}}`)}
	ids := Template{}.Render(msgs[:1], tools, false)
	back, gotTools := parseRendered(ids)
	if len(back) != 1 || len(gotTools) != 1 || ids[len(ids)-2] != TokEnd {
		t.Fatalf("tools block: %v %s", back, gotTools)
	}
}

// TestTokenPromptHTTP checks /tokenize and token-id prompts over HTTP:
// the ids /tokenize gives are the chat prompt's ids, a token-id request
// draws the same reply as the chat request of the same conversation, and
// its text holds the tool call the chat reply carries as a field.
func TestTokenPromptHTTP(t *testing.T) {
	_, url := startHTTP(t, Options{Seed: 3, ToolCallRate: 1})
	msgs := []map[string]any{{"role": "user", "content": "What is 2 + 2?"}}
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"calc","parameters":{"type":"object","properties":{"e":{"type":"string"}},"required":["e"]}}}`)}
	post := func(path string, body any, out any) {
		t.Helper()
		data, _ := json.Marshal(body)
		resp, err := http.Post(url+path, "application/json", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: HTTP %d", path, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	var tok struct {
		Tokens []int32 `json:"tokens"`
		Count  int     `json:"count"`
	}
	post("/tokenize", map[string]any{"messages": msgs, "tools": tools, "add_generation_prompt": true}, &tok)
	var chat, comp chatResponse
	post("/v1/chat/completions", map[string]any{"messages": msgs, "tools": tools, "seed": 5, "return_token_ids": true}, &chat)
	post("/v1/completions", map[string]any{"prompt": tok.Tokens, "seed": 5, "return_token_ids": true, "logprobs": 1}, &comp)
	if tok.Count != len(tok.Tokens) || !slices.Equal(tok.Tokens, chat.PromptTokenIDs) {
		t.Fatalf("tokenize %v, chat prompt %v", tok.Tokens, chat.PromptTokenIDs)
	}
	if !slices.Equal(chat.Choices[0].TokenIDs, comp.Choices[0].TokenIDs) || len(comp.Choices[0].TokenIDs) == 0 {
		t.Fatalf("chat ids %v, token-prompt ids %v", chat.Choices[0].TokenIDs, comp.Choices[0].TokenIDs)
	}
	if len(chat.Choices[0].Message.ToolCalls) != 1 || !strings.Contains(comp.Choices[0].Text, "<tool_call>") {
		t.Fatalf("chat tool calls %v, text %q", chat.Choices[0].Message.ToolCalls, comp.Choices[0].Text)
	}
	if !slices.Equal(comp.PromptTokenIDs, tok.Tokens) || len(comp.Choices[0].Logprobs.TokenLogprobs) != len(comp.Choices[0].TokenIDs) {
		t.Fatalf("completions prompt ids %v, logprobs %v", comp.PromptTokenIDs, comp.Choices[0].Logprobs)
	}
}

// TestTokensInProcess checks the in-process client's tokens API and the
// reasoning block of strip_reasoning replies.
func TestTokensInProcess(t *testing.T) {
	s := New(Options{Seed: 1, StripReasoning: true})
	defer s.Close()
	ctx := context.Background()
	msgs := []pipeline.Message{{Role: "user", Content: "What is 3 + 4?"}}
	ids, err := s.Tokenize(ctx, &inference.TokenizeRequest{Messages: msgs, AddGenerationPrompt: true})
	if err != nil || ids[len(ids)-1] != TokAssistant {
		t.Fatalf("Tokenize = %v, %v", ids, err)
	}
	resp, err := s.Complete(ctx, &inference.Request{PromptTokenIDs: ids, Params: map[string]any{"seed": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.PromptTokenIDs, ids) || !strings.HasPrefix(resp.Message.Content, "<think>") || !strings.Contains(resp.Message.Content, `\boxed{`) {
		t.Fatalf("response %+v", resp)
	}
	if got := Detokenize(resp.Message.TokenIDs, true); got != resp.Message.Content {
		t.Fatalf("text %q, ids spell %q", resp.Message.Content, got)
	}
}
