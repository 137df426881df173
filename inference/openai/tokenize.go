package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/trajflow/trajflow/inference"
)

// Tokenize renders and tokenizes req's messages with the server's chat
// template: POST {root}/tokenize as vLLM and SGLang serve it
// ({"model", "messages", "tools", "add_generation_prompt",
// "add_special_tokens": false, and req.TemplateArgs} → {"tokens": [...],
// "count": N}; with req.Raw, {"model", "prompt", "add_special_tokens":
// false}). It
// retries and fails like Complete; a server without the endpoint fails
// with an error that says to use generate.api: chat.
func (c *HTTPClient) Tokenize(ctx context.Context, req *inference.TokenizeRequest) ([]int32, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	model := req.Model
	if model == "" {
		model = c.cfg.Model
	}
	w := map[string]any{"model": model, "messages": toWireMessages(req.Messages), "add_generation_prompt": req.AddGenerationPrompt, "add_special_tokens": false}
	if len(req.Tools) > 0 {
		w["tools"] = req.Tools
	}
	for k, v := range req.TemplateArgs {
		w[k] = v // the row's or config's chat_template_kwargs, add_special_tokens, ...
	}
	if req.Raw {
		w = map[string]any{"model": model, "prompt": req.Text, "add_special_tokens": false}
	}
	body, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("llm: encode tokenize body: %w", err)
	}
	var ids []int32
	_, err = c.do(ctx, req.Affinity, func(ep *endpoint) string { return ep.root + "/tokenize" }, body, func(data []byte, _ http.Header) error {
		var r struct {
			Tokens      *[]int32 `json:"tokens"`
			MaxModelLen int64    `json:"max_model_len"`
		}
		if err := json.Unmarshal(data, &r); err != nil {
			return err
		}
		if r.Tokens == nil {
			return errors.New(`no "tokens" in the /tokenize response`)
		}
		ids = *r.Tokens
		c.noteMaxModelLen(r.MaxModelLen)
		return nil
	})
	if err != nil {
		var e *inference.Error
		if errors.As(err, &e) && e.Class == inference.ClassHTTP && (e.Status == http.StatusNotFound || e.Status == http.StatusMethodNotAllowed) {
			e.Msg += " (this server has no POST /tokenize; generate.api: tokens and sglang need a server that tokenizes chat messages, such as vLLM or SGLang: use generate.api: chat)"
		}
		return nil, err
	}
	return ids, nil
}

// Detokenize spells ids with the server's tokenizer: POST
// {root}/detokenize as vLLM and SGLang serve it ({"model", "tokens"} →
// {"prompt"}). It retries and fails like Complete.
func (c *HTTPClient) Detokenize(ctx context.Context, model string, ids []int32) (string, error) {
	if err := c.checkOpen(); err != nil {
		return "", err
	}
	if model == "" {
		model = c.cfg.Model
	}
	body, err := json.Marshal(map[string]any{"model": model, "tokens": ids})
	if err != nil {
		return "", fmt.Errorf("llm: encode detokenize body: %w", err)
	}
	var text string
	_, err = c.do(ctx, "", func(ep *endpoint) string { return ep.root + "/detokenize" }, body, func(data []byte, _ http.Header) error {
		var r struct {
			Prompt *string `json:"prompt"`
		}
		if err := json.Unmarshal(data, &r); err != nil {
			return err
		}
		if r.Prompt == nil {
			return errors.New(`no "prompt" in the /detokenize response`)
		}
		text = *r.Prompt
		return nil
	})
	return text, err
}
