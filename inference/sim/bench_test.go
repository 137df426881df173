package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// benchServer starts a sim-server at time scale 1 whose replies all have
// exactly tokens tokens (σ = 0), behind a real HTTP server.
func benchServer(b *testing.B, tokens int) (*Server, string, *http.Client) {
	b.Helper()
	s := New(Options{Seed: 1, TimeScale: 1, Length: LengthModel{Median: float64(tokens), Cap: 1 << 20}})
	ts := httptest.NewServer(s.Handler())
	b.Cleanup(func() { ts.Close(); s.Close() })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	return s, ts.URL, client
}

// benchPrompt is a prompt of about words vocabulary words.
func benchPrompt(i, words int) string {
	return fmt.Sprintf("task %d: %s", i, strings.TrimSpace(strings.Repeat("the ", words)))
}

func benchPost(client *http.Client, base string, i, words int) (prompt, completion int, err error) {
	body := fmt.Sprintf(`{"model":"sim","messages":[{"role":"user","content":%q}],"seed":%d}`, benchPrompt(i, words), i)
	resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != 200 {
		return 0, 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, data)
	}
	var r struct {
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	err = json.Unmarshal(data, &r)
	return r.Usage.PromptTokens, r.Usage.CompletionTokens, err
}

// BenchmarkHTTPLatency measures one request alone over HTTP at time scale
// 1 against the model: L·(a+c) + p·P.
func BenchmarkHTTPLatency(b *testing.B) {
	const L, words = 500, 1000
	s, base, client := benchServer(b, L)
	o := s.Options()
	var measured, model time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		p, l, err := benchPost(client, base, i, words)
		if err != nil {
			b.Fatal(err)
		}
		measured += time.Since(start)
		model += time.Duration(l)*(o.A+o.C) + time.Duration(p)*o.P
	}
	b.ReportMetric(float64(measured.Milliseconds())/float64(b.N), "measured_ms")
	b.ReportMetric(float64(model.Milliseconds())/float64(b.N), "model_ms")
	b.ReportMetric(measured.Seconds()/model.Seconds(), "measured/model")
}

// BenchmarkHTTPFullBatch sends B concurrent requests over HTTP at time scale
// 1 and compares the makespan and decode throughput with the model:
// L·(a + c·B) + p·ΣP.
func BenchmarkHTTPFullBatch(b *testing.B) {
	const L, words = 300, 100
	s, base, client := benchServer(b, L)
	o := s.Options()
	B := o.Capacity
	var measured, model time.Duration
	var tokens int64
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var prompts, maxL int
		errc := make(chan error, B)
		start := time.Now()
		for r := 0; r < B; r++ {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				p, l, err := benchPost(client, base, i*B+r, words)
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				prompts += p
				maxL = max(maxL, l)
				tokens += int64(l)
				mu.Unlock()
			}(r)
		}
		wg.Wait()
		measured += time.Since(start)
		close(errc)
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		model += time.Duration(maxL)*(o.A+time.Duration(B)*o.C) + time.Duration(prompts)*o.P
	}
	st := s.Stats()
	b.ReportMetric(float64(measured.Milliseconds())/float64(b.N), "measured_ms")
	b.ReportMetric(float64(model.Milliseconds())/float64(b.N), "model_ms")
	b.ReportMetric(measured.Seconds()/model.Seconds(), "measured/model")
	b.ReportMetric(float64(tokens)/measured.Seconds(), "tok/s")
	b.ReportMetric(float64(tokens)/model.Seconds(), "model_tok/s")
	b.ReportMetric(st.MeanBatch, "mean_batch")
}

// BenchmarkCompleteInstant is the CPU cost of one in-process reply of the
// short preset at time scale 0.
func BenchmarkCompleteInstant(b *testing.B) {
	s := New(Options{Seed: 1})
	req := &inference.Request{Messages: []pipeline.Message{{Role: "user", Content: "What is 12 + 7 * 3?"}}, Params: map[string]any{"seed": 1}}
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.Complete(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
