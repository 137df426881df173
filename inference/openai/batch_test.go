package openai

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
)

func batchServer(t *testing.T, wrap func(h http.Handler) http.Handler) (*sim.Server, string) {
	t.Helper()
	s := sim.New(sim.Options{Seed: 1, Model: "m"})
	h := s.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() { ts.Close(); s.Close() })
	return s, ts.URL + "/v1"
}

func newBatchClient(t *testing.T, endpoint, state string, bc BatchConfig) *BatchClient {
	t.Helper()
	cfg := inference.Config{Endpoints: []string{endpoint}, Model: "m", MaxAttempts: 3, BackoffBase: pipeline.Duration(time.Millisecond), BackoffMax: pipeline.Duration(10 * time.Millisecond)}
	bc.SetDefaults()
	if bc.PollInterval == pipeline.Duration(30*time.Second) {
		bc.PollInterval = pipeline.Duration(10 * time.Millisecond)
	}
	c, err := NewBatch(context.Background(), cfg, bc, BatchOptions{StateFile: state, RunID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func question(i int) *inference.Request {
	return &inference.Request{Messages: []pipeline.Message{{Role: "user", Content: fmt.Sprintf("What is %d + 1?", i)}}, Params: map[string]any{"max_tokens": 16}, Sample: fmt.Sprintf("t%d-a0-r0", i)}
}

// completeAll sends n requests at once and fails on any error.
func completeAll(t *testing.T, c *BatchClient, n int) []*inference.Response {
	t.Helper()
	out := make([]*inference.Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			resp, err := c.Complete(ctx, question(i))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			out[i] = resp
		}()
	}
	wg.Wait()
	return out
}

func TestBatchSplitsAtLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bc      BatchConfig
		batches int
	}{
		{"max_requests", BatchConfig{MaxRequests: 3, FlushAfter: pipeline.Duration(200 * time.Millisecond)}, 3},
		{"max_bytes", BatchConfig{MaxBytes: 1024, FlushAfter: pipeline.Duration(200 * time.Millisecond)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ep := batchServer(t, nil)
			c := newBatchClient(t, ep, filepath.Join(t.TempDir(), "batches.jsonl"), tc.bc)
			defer c.Close()
			resps := completeAll(t, c, 7)
			for i, r := range resps {
				if r == nil || r.Message.Content == "" || r.CompletionTokens == 0 || !strings.HasPrefix(r.Endpoint, "batch ") {
					t.Fatalf("response %d: %+v", i, r)
				}
			}
			st := s.BatchStats()
			if st.Lines != 7 || len(st.Submitted) != 7 {
				t.Fatalf("server: %+v", st)
			}
			if tc.name == "max_requests" && st.Batches != tc.batches {
				t.Fatalf("%d batches, want %d", st.Batches, tc.batches)
			}
			if tc.name == "max_bytes" && st.Batches < tc.batches {
				t.Fatalf("%d batches of 1 KiB files, want at least %d", st.Batches, tc.batches)
			}
			if cs := c.Stats(); cs.Requests != 7 || int(cs.Batches) != st.Batches || cs.Pending != 0 {
				t.Fatalf("client stats %+v", cs)
			}
		})
	}
}

// The same requests from a restarted client are answered by the batch
// the earlier one submitted, found by its key when the create call's
// answer was lost.
func TestBatchRecoversCreatedBatch(t *testing.T) {
	var creates atomic.Int64
	s, ep := batchServer(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path == "/v1/batches" && creates.Add(1) == 1 {
				// The batch is created, but its answer is lost.
				h.ServeHTTP(httptest.NewRecorder(), r)
				http.Error(w, "bad gateway", http.StatusBadGateway)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	state := filepath.Join(t.TempDir(), "batches.jsonl")
	c := newBatchClient(t, ep, state, BatchConfig{FlushAfter: pipeline.Duration(50 * time.Millisecond)})
	first := completeAll(t, c, 5)
	c.Close()
	if st := s.BatchStats(); st.Batches != 1 || st.Lines != 5 {
		t.Fatalf("an unanswered create was made again: %+v", st)
	}
	// Drop the state file's batch line, as a kill before it was written
	// would: the restart must find the batch by its key.
	data, _ := os.ReadFile(state)
	var kept []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.Contains(l, `"op":"batch"`) {
			kept = append(kept, l)
		}
	}
	// And a torn line at the end, as a kill in the middle of a write leaves.
	os.WriteFile(state, []byte(strings.Join(kept, "\n")+"\n{\"op\":\"pl"), 0o644)
	c2 := newBatchClient(t, ep, state, BatchConfig{FlushAfter: pipeline.Duration(50 * time.Millisecond)})
	defer c2.Close()
	again := completeAll(t, c2, 5)
	if st := s.BatchStats(); st.Batches != 1 || st.Uploads != 1 {
		t.Fatalf("the restart submitted again: %+v", st)
	}
	for i := range first {
		if first[i].Message.Content != again[i].Message.Content {
			t.Fatalf("request %d: %q then %q", i, first[i].Message.Content, again[i].Message.Content)
		}
	}
	if cs := c2.Stats(); cs.Recovered != 1 || cs.Batches != 0 {
		t.Fatalf("client stats %+v", cs)
	}
	// The state file now records the batch found, and the torn line is gone.
	f, _ := os.Open(state)
	defer f.Close()
	sc := bufio.NewScanner(f)
	found := false
	for sc.Scan() {
		var e stateEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("state line %q: %v", sc.Text(), err)
		}
		found = found || e.Op == "batch"
	}
	if !found {
		t.Fatal("the batch found by its key was not recorded")
	}
	// A request answered once goes to a new batch when asked again (a retry).
	if _, err := c2.Complete(context.Background(), question(0)); err != nil {
		t.Fatal(err)
	}
	if st := s.BatchStats(); st.Batches != 2 {
		t.Fatalf("a retried request was not submitted again: %+v", st)
	}
}

// A batch planned (and uploaded) but never created is abandoned on
// restart; its requests join a new batch.
func TestBatchAbandonsUncreated(t *testing.T) {
	s, ep := batchServer(t, nil)
	state := filepath.Join(t.TempDir(), "batches.jsonl")
	id := CustomID("m", []byte("x"), "")
	os.WriteFile(state, []byte(fmt.Sprintf(`{"op":"plan","key":"k1","ids":[%q]}`+"\n"+`{"op":"file","key":"k1","file":"file-gone"}`+"\n"+`{"op":"plan","key":"k2","ids":[]}`+"\n", id)), 0o644)
	c := newBatchClient(t, ep, state, BatchConfig{FlushAfter: pipeline.Duration(10 * time.Millisecond)})
	completeAll(t, c, 2)
	c.Close()
	data, _ := os.ReadFile(state)
	if strings.Count(string(data), `"op":"abandon"`) != 2 {
		t.Fatalf("state:\n%s", data)
	}
	if st := s.BatchStats(); st.Batches != 1 || st.Lines != 2 {
		t.Fatalf("server %+v", st)
	}
}

func TestBatchStateErrors(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		"not json":   "garbage\n",
		"unknown op": `{"op":"explode","key":"k"}` + "\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		os.WriteFile(p, []byte(data), 0o644)
		if _, _, err := openState(p); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestBatchResultClasses(t *testing.T) {
	type resp = batchOutResponse
	type errT = batchOutError
	ok := `{"choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}`
	for _, tc := range []struct {
		name  string
		resp  *resp
		err   *errT
		class string
	}{
		{"ok", &resp{200, json.RawMessage(ok)}, nil, ""},
		{"rate", &resp{429, json.RawMessage(`{"error": {"message": "slow down"}}`)}, nil, inference.ClassRateLimited},
		{"server", &resp{500, json.RawMessage(`{"error": {"message": "oops"}}`)}, nil, inference.ClassServer},
		{"context", &resp{400, json.RawMessage(`{"error": {"message": "This model's maximum context length is 8192 tokens"}}`)}, nil, inference.ClassContextLength},
		{"bad body", &resp{200, json.RawMessage(`{"choices": []}`)}, nil, inference.ClassBadResponse},
		{"expired", nil, &errT{"batch_expired", "expired"}, inference.ClassTimeout},
		{"other", nil, &errT{"invalid_request", "no"}, inference.ClassHTTP},
		{"neither", nil, nil, inference.ClassBadResponse},
	} {
		r := resultOf("b1", tc.resp, tc.err)
		if got := inference.ErrorClass(r.err); got != tc.class {
			t.Errorf("%s: class %q, want %q (%v)", tc.name, got, tc.class, r.err)
		}
		if tc.class == "" && (r.resp == nil || r.resp.Message.Content != "4") {
			t.Errorf("%s: %+v", tc.name, r.resp)
		}
	}
}

func TestCheckBatchAPI(t *testing.T) {
	_, ep := batchServer(t, nil)
	cfg := inference.Config{Endpoints: []string{ep}, Model: "m"}
	if err := CheckBatchAPI(context.Background(), cfg, ""); err != nil {
		t.Fatal(err)
	}
	_, bare := batchServer(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "/batches") {
				http.NotFound(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	cfg.Endpoints = []string{bare}
	err := CheckBatchAPI(context.Background(), cfg, "")
	if err == nil || !strings.Contains(err.Error(), "needs a server with the Batch API") {
		t.Fatalf("a server without the Batch API: %v", err)
	}
}

func FuzzBatchState(f *testing.F) {
	f.Add([]byte(`{"op":"plan","key":"k","ids":["a","b"]}` + "\n" + `{"op":"file","key":"k","file":"f"}` + "\n"))
	f.Add([]byte(`{"op":"batch","key":"k","batch":"b"}` + "\n" + `{"op":"ab`))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "batches.jsonl")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, planned, err := openState(p)
		if err != nil {
			return
		}
		defer s.close()
		for _, b := range planned {
			if b.Key == "" {
				t.Fatalf("a batch without a key from %q", data)
			}
		}
		// What was read is whole lines: appending keeps the file readable.
		if err := s.append(stateEvent{Op: "abandon", Key: "z"}); err != nil {
			t.Fatal(err)
		}
		s.close()
		if _, _, err := openState(p); err != nil {
			t.Fatalf("after an append: %v (from %q)", err, data)
		}
	})
}

// Close reports the state file's close: the file every submission was
// recorded in (here the second Close, whose file is already closed).
func TestBatchCloseReportsTheStateFile(t *testing.T) {
	_, ep := batchServer(t, nil)
	c := newBatchClient(t, ep, filepath.Join(t.TempDir(), "batches.jsonl"), BatchConfig{FlushAfter: pipeline.Duration(50 * time.Millisecond)})
	completeAll(t, c, 2)
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err == nil || !strings.Contains(err.Error(), "batch state") {
		t.Fatalf("second Close: %v, want the state file's error", err)
	}
}
