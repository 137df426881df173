package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/structured"
	"github.com/trajflow/trajflow/pipeline"
)

// With generate.invalid_retries, a request whose reply fails its schema
// goes to the Batch API again as a new request (a seed of its own, so a
// body and a custom_id of its own): against a server whose answer is fixed
// per body (the simulator never answers the schema), no custom_id and no
// body is submitted twice, and every try is counted.
func TestBatchInvalidRetriesAreNewRequests(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    structured.Config
		params map[string]any
	}{
		{"a seed of its own", structured.Config{}, nil},
		{"from the request's seed", structured.Config{}, map[string]any{"seed": 7}},
		{"invalid_retry_params too", structured.Config{InvalidRetryParams: map[string]any{"temperature": 1.0}}, map[string]any{"temperature": 0.0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			ids, bodies := map[string]int{}, map[string]int{}
			_, url := batchServer(t, func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Method == http.MethodPost && r.URL.Path == "/v1/files" {
						raw, _ := io.ReadAll(r.Body)
						r.Body = io.NopCloser(bytes.NewReader(raw))
						sc := bufio.NewScanner(bytes.NewReader(raw))
						sc.Buffer(nil, 1<<20)
						mu.Lock()
						for sc.Scan() {
							var line struct {
								CustomID string          `json:"custom_id"`
								Body     json.RawMessage `json:"body"`
							}
							if json.Unmarshal(sc.Bytes(), &line) == nil && line.CustomID != "" {
								ids[line.CustomID]++
								bodies[string(line.Body)]++
							}
						}
						mu.Unlock()
					}
					h.ServeHTTP(w, r)
				})
			})
			bc := newBatchClient(t, url, t.TempDir()+"/batches.jsonl", BatchConfig{FlushAfter: pipeline.Duration(20 * time.Millisecond)})
			defer bc.Close()
			three := 3
			cfg := tc.cfg
			cfg.InvalidRetries = &three
			cfg.SetDefaults()
			c := structured.Wrap(bc, cfg)
			const n = 5
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := question(i)
					req.Params["response_format"] = map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "a",
						"schema": map[string]any{"type": "object", "required": []any{"answer"}, "properties": map[string]any{"answer": map[string]any{"type": "integer"}}}}}
					for k, v := range tc.params {
						req.Params[k] = v
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					_, err := c.Complete(ctx, req)
					var e *inference.Error
					if !errors.As(err, &e) || e.Class != structured.ClassInvalidOutput || e.Discarded.Tries != 4 {
						t.Errorf("request %d: %v (%+v), want invalid_output after 4 tries, each counted", i, err, e)
					}
				}()
			}
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			if len(ids) != 4*n {
				t.Fatalf("%d custom_ids submitted, want %d (4 tries of %d requests)", len(ids), 4*n, n)
			}
			for id, k := range ids {
				if k != 1 {
					t.Fatalf("custom_id %s submitted %d times", id, k)
				}
			}
			for b, k := range bodies {
				if k != 1 {
					t.Fatalf("body submitted %d times: %s", k, b)
				}
				if tc.cfg.InvalidRetryParams != nil && strings.Contains(b, `"seed"`) && !strings.Contains(b, `"temperature":1`) {
					t.Fatalf("a retry without invalid_retry_params: %s", b)
				}
			}
		})
	}
}
