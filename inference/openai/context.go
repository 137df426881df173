package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// ctxLearn is the state of learning one endpoint's context length: done
// once it was asked (whatever it answered).
type ctxLearn struct {
	mu   sync.Mutex
	done bool
}

// learnContext learns the context length of the model on the endpoint
// named name, once per endpoint, where the server publishes it
// (noteMaxModelLen keeps the smallest of a fleet):
//
//   - GET {base}/models: vLLM's max_model_len on the model's entry;
//   - GET {root}/api/ps: Ollama's context_length of the model as loaded,
//     its effective context (num_ctx, or the server's default: its
//     OLLAMA_CONTEXT_LENGTH, else 4096, 32768 or 262144 by the GPU
//     memory, in Ollama v0.17.4 server/routes.go), no more than the
//     model's own;
//   - POST {root}/api/show {"model"}: Ollama's num_ctx among the model's
//     parameters, no more than model_info's "<arch>.context_length"
//     (without num_ctx the effective context is the server's default,
//     which /api/show does not say, and nothing is learnt).
//
// It is called after an answer, when Ollama has loaded the model. Each
// call is bounded by ProbeTimeout; failures are silent (the context stays
// unknown).
func (c *HTTPClient) learnContext(ctx context.Context, name string) {
	var ep *endpoint
	c.fleet.mu.Lock()
	for _, e := range c.fleet.eps {
		if e.name == name {
			ep = e
		}
	}
	c.fleet.mu.Unlock()
	if ep == nil {
		return
	}
	c.learnMu.Lock()
	if c.learn == nil {
		c.learn = map[string]*ctxLearn{}
	}
	l := c.learn[name]
	if l == nil {
		l = &ctxLearn{}
		c.learn[name] = l
	}
	c.learnMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.done = true
	if n := c.contextOf(ctx, ep); n > 0 {
		c.noteMaxModelLen(n)
	}
}

// contextOf asks ep for its context length (learnContext); 0: unknown.
func (c *HTTPClient) contextOf(ctx context.Context, ep *endpoint) int64 {
	model := c.cfg.Model
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int64  `json:"max_model_len"`
		} `json:"data"`
	}
	if c.fetchJSON(ctx, http.MethodGet, ep.base+"/models", nil, &models) {
		for _, m := range models.Data {
			if servesModel(m.ID, model) && m.MaxModelLen > 0 {
				return m.MaxModelLen
			}
		}
	}
	var ps struct {
		Models []struct {
			Name          string `json:"name"`
			Model         string `json:"model"`
			ContextLength int64  `json:"context_length"`
		} `json:"models"`
	}
	if c.fetchJSON(ctx, http.MethodGet, ep.root+"/api/ps", nil, &ps) {
		for _, m := range ps.Models {
			if (servesModel(m.Name, model) || servesModel(m.Model, model)) && m.ContextLength > 0 {
				return m.ContextLength
			}
		}
	}
	body, err := json.Marshal(map[string]string{"model": model})
	if err != nil {
		return 0
	}
	var show struct {
		ModelInfo  map[string]any `json:"model_info"`
		Parameters string         `json:"parameters"`
	}
	if !c.fetchJSON(ctx, http.MethodPost, ep.root+"/api/show", body, &show) {
		return 0
	}
	return showContext(show.ModelInfo, show.Parameters)
}

// showContext is the context length Ollama's /api/show answer gives: the
// num_ctx parameter, no more than model_info's "<arch>.context_length"
// (the model's own, to which Ollama clamps num_ctx); 0 without num_ctx.
func showContext(info map[string]any, params string) int64 {
	var numCtx int64
	for _, line := range strings.Split(params, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "num_ctx" {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil && n > 0 {
				numCtx = n
			}
		}
	}
	if numCtx == 0 {
		return 0
	}
	arch, _ := info["general.architecture"].(string)
	if own, ok := info[arch+".context_length"].(float64); ok && arch != "" && own > 0 && int64(own) < numCtx {
		return int64(own)
	}
	return numCtx
}

// fetchJSON sends a request to u and decodes a 2xx JSON answer into v;
// false on any failure.
func (c *HTTPClient) fetchJSON(ctx context.Context, method, u string, body []byte, v any) bool {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return false
	}
	defer func() { _ = resp.Body.Close() }() // best effort: a response body, read
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
		return false
	}
	return json.Unmarshal(data, v) == nil
}

// MaxModelLen is the model's context length as the servers reported it
// (the smallest, for a fleet): /tokenize's max_model_len, or, learnt
// after an endpoint's first chat answer, vLLM's /v1/models or Ollama's
// /api/ps and /api/show (learnContext); 0 before one did.
func (c *HTTPClient) MaxModelLen() int { return int(c.maxModelLen.Load()) }

// noteMaxModelLen records a max_model_len a server reported.
func (c *HTTPClient) noteMaxModelLen(n int64) {
	for n > 0 {
		cur := c.maxModelLen.Load()
		if cur != 0 && cur <= n || c.maxModelLen.CompareAndSwap(cur, n) {
			return
		}
	}
}
