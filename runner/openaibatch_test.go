package runner_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
)

// batchServer is an OpenAI-compatible server that answers chat and
// completions requests with a body of its own making, and records each
// body it sent by the request's prompt text.
type batchServer struct {
	mu    sync.Mutex
	sent  map[string][]byte // prompt text → body sent
	paths map[string]string // prompt text → path asked
	n     int
}

func newBatchServer() *batchServer {
	return &batchServer{sent: map[string][]byte{}, paths: map[string]string{}}
}

func (s *batchServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
		return
	}
	var req struct {
		Model    string `json:"model"`
		Prompt   string `json:"prompt"`
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens int `json:"max_tokens"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	prompt := req.Prompt
	if len(req.Messages) > 0 {
		prompt = req.Messages[len(req.Messages)-1].Content
	}
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	var out []byte
	if strings.HasSuffix(r.URL.Path, "/chat/completions") {
		out = fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"answer to %s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d}}`, n, req.Model, prompt, 3+n%5, 10+n%5)
	} else {
		out = fmt.Appendf(nil, `{"id":"cmpl-%d","object":"text_completion","created":1,"model":%q,"choices":[{"index":0,"text":" completed %s","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}`, n, req.Model, prompt)
	}
	s.mu.Lock()
	s.sent[prompt] = out
	s.paths[prompt] = r.URL.Path
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", fmt.Sprintf("req-%d", n))
	w.Write(out)
}

// writeBatchInput writes an OpenAI Batch input file of n lines, every
// tenth a completions request, and the bad lines (by 1-based line number)
// in the ways a line can be bad. It returns the path.
func writeBatchInput(t testing.TB, dir string, n int) (path string, bad map[int]string) {
	t.Helper()
	bad = map[int]string{
		17:  `{"custom_id":"req-16","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"x"}}`,
		50:  `{"custom_id":"req-49","method":"POST","url":"/v1/chat/completions","body":{"model":"m","stream":true,"messages":[{"role":"user","content":"q49"}]}}`,
		99:  `{"custom_id":"req-98","method":"GET","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"q98"}]}}`,
		150: `{"custom_id":"req-149","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`,
		151: `{"custom_id":"req-150","method":"POST","url":"/v1/chat/completions","body":"not an object"}`,
	}
	var b strings.Builder
	for i := 0; i < n; i++ {
		if l, ok := bad[i+1]; ok {
			b.WriteString(l + "\n")
			continue
		}
		if i%10 == 3 {
			fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/completions","body":{"model":"gpt-x","prompt":"q%d","max_tokens":8}}`+"\n", i, i)
			continue
		}
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-x","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"q%d"}],"max_tokens":16,"temperature":0}}`+"\n", i, i)
	}
	path = filepath.Join(dir, "batch.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, bad
}

// batchLines reads every line of OUTPUT/openai_batch's files of kind.
func batchLines(t testing.TB, out, kind string) []map[string]json.RawMessage {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(out, schema.OpenAIBatchDir, kind+"-*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []map[string]json.RawMessage
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l map[string]json.RawMessage
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v: %s", p, err, sc.Bytes())
			}
			lines = append(lines, l)
		}
		f.Close()
	}
	return lines
}

func unquote(t testing.TB, raw json.RawMessage) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return s
}

func batchConfig(t *testing.T, input, url string, sets ...string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	yaml := fmt.Sprintf("source: {path: %s, format: openai_batch}\ngenerate: {endpoints: [%s/v1], model: m, max_attempts: 1}\noutput: {dir: %s, openai_batch: true}\nrun: {progress: 0}\n", input, url, filepath.Join(dir, "out"))
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p, sets)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// An OpenAI Batch input file through a run: every good line has one
// output line with its custom_id and the server's reply as its body, every
// bad line one error line naming its line, and the Parquet rows carry the
// same custom_ids.
func TestOpenAIBatchFilesInAndOut(t *testing.T) {
	srv := newBatchServer()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	input, bad := writeBatchInput(t, t.TempDir(), 200)
	cfg := batchConfig(t, input, hs.URL)
	if cfg.Env.Name != "none" || cfg.Run.ResumeErrors != "keep" {
		t.Fatalf("env.name %q, run.resume_errors %q: want none and keep with an OpenAI Batch file", cfg.Env.Name, cfg.Run.ResumeErrors)
	}
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.OK != int64(200-len(bad)) || sum.Errors != int64(len(bad)) {
		t.Fatalf("summary: %d ok, %d errors; want %d and %d", sum.OK, sum.Errors, 200-len(bad), len(bad))
	}
	hs.Close()
	out := batchLines(t, cfg.Output.Dir, schema.OpenAIBatchOutput)
	seen := map[string]bool{}
	for _, l := range out {
		id := unquote(t, l["custom_id"])
		if seen[id] {
			t.Fatalf("custom_id %s has two lines", id)
		}
		seen[id] = true
		if string(l["error"]) != "null" {
			t.Fatalf("%s: error %s in the output file", id, l["error"])
		}
		var resp struct {
			StatusCode int             `json:"status_code"`
			RequestID  string          `json:"request_id"`
			Body       json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(l["response"], &resp); err != nil {
			t.Fatal(err)
		}
		var i int
		fmt.Sscanf(id, "req-%d", &i)
		prompt := fmt.Sprintf("q%d", i)
		if sent := srv.sent[prompt]; !bytes.Equal(resp.Body, sent) {
			t.Fatalf("%s: body %s, the server sent %s", id, resp.Body, sent)
		}
		wantPath := "/v1/chat/completions"
		if i%10 == 3 {
			wantPath = "/v1/completions"
		}
		if srv.paths[prompt] != wantPath {
			t.Fatalf("%s went to %s, its url is %s", id, srv.paths[prompt], wantPath)
		}
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.RequestID, "req-") {
			t.Fatalf("%s: status %d, request_id %q", id, resp.StatusCode, resp.RequestID)
		}
	}
	if len(out) != 200-len(bad) {
		t.Fatalf("%d output lines, want %d", len(out), 200-len(bad))
	}
	errs := batchLines(t, cfg.Output.Dir, schema.OpenAIBatchErrors)
	if len(errs) != len(bad) {
		t.Fatalf("%d error lines, want %d", len(errs), len(bad))
	}
	for _, l := range errs {
		id := unquote(t, l["custom_id"])
		var i int
		fmt.Sscanf(id, "req-%d", &i)
		if _, ok := bad[i+1]; !ok || seen[id] {
			t.Fatalf("%s: an error line for a good line, or a second line", id)
		}
		var e struct{ Code, Message string }
		if err := json.Unmarshal(l["error"], &e); err != nil {
			t.Fatal(err)
		}
		if e.Code != "invalid_request" || !strings.Contains(e.Message, fmt.Sprintf("batch.jsonl:%d", i+1)) {
			t.Fatalf("%s: error %+v does not name line %d", id, e, i+1)
		}
	}
	// The Parquet rows are the same requests.
	for _, r := range readBack(t, cfg.Output.Dir, schema.DataDir) {
		if r.Reward != 0 || r.NumTurns != 1 {
			t.Fatalf("%s: reward %v, %d turns: want one generation with no environment", r, r.Reward, r.NumTurns)
		}
	}
}

// Two lines with one custom_id stop the run, naming both lines.
func TestOpenAIBatchDuplicateCustomID(t *testing.T) {
	srv := newBatchServer()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	dir := t.TempDir()
	input := filepath.Join(dir, "batch.jsonl")
	line := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}`
	other := `{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"ho"}]}}`
	os.WriteFile(input, []byte(line+"\n"+other+"\n\n"+strings.Replace(line, "hi", "again", 1)+"\n"), 0o644)
	cfg := batchConfig(t, input, hs.URL)
	_, err := run(t, cfg, runner.Options{})
	if err == nil || !strings.Contains(err.Error(), `batch.jsonl:4: custom_id "a" is already on line 1`) {
		t.Fatalf("err %v: want the duplicate named with both lines", err)
	}
}

// An OpenAI Batch file sent through the Batch API (generate.api: batch)
// with no env section runs as it is: no environment is one turn, so the
// run does not ask for env.max_turns: 1. Each good request is submitted
// once and answered in one turn.
func TestOpenAIBatchFileThroughBatchAPI(t *testing.T) {
	s := sim.New(sim.Options{Seed: 3, Model: "m"})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	defer s.Close()
	input, bad := writeBatchInput(t, t.TempDir(), 60)
	cfg := batchConfig(t, input, hs.URL, "generate.api=batch", "generate.batch.flush_after=50ms", "generate.batch.poll_interval=20ms")
	if cfg.Env.MaxTurns != 0 {
		t.Fatalf("env.max_turns %d: want it left unset", cfg.Env.MaxTurns)
	}
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	good := 60
	for l := range bad {
		if l <= 60 {
			good--
		}
	}
	if sum.OK != int64(good) {
		t.Fatalf("summary: %d ok, %d errors; want %d ok", sum.OK, sum.Errors, good)
	}
	st := s.BatchStats()
	if len(st.Submitted) != good {
		t.Fatalf("the server saw %d requests, want %d", len(st.Submitted), good)
	}
	for _, r := range readBack(t, cfg.Output.Dir, schema.DataDir) {
		if r.NumTurns != 1 {
			t.Fatalf("%s: %d turns, want 1", r.TrajID, r.NumTurns)
		}
	}
}

// generate.api: batch under an ordinary generate.concurrency warns at the
// start, with the number to set: a batch holds at most the requests in
// flight, and the run would send small batches one after another.
func TestBatchAPISmallConcurrencyWarns(t *testing.T) {
	s := sim.New(sim.Options{Seed: 3, Model: "m"})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	defer s.Close()
	input, _ := writeBatchInput(t, t.TempDir(), 20)
	for _, tt := range []struct {
		concurrency string
		warn        bool
	}{{"32", true}, {"50000", false}} {
		cfg := batchConfig(t, input, hs.URL, "generate.api=batch", "generate.batch.flush_after=50ms", "generate.batch.poll_interval=20ms", "generate.concurrency="+tt.concurrency)
		var stderr strings.Builder
		if _, err := run(t, cfg, runner.Options{Stderr: &stderr}); err != nil {
			t.Fatal(err)
		}
		got := strings.Contains(stderr.String(), "holds at most generate.concurrency ("+tt.concurrency+") requests in a batch") &&
			strings.Contains(stderr.String(), "up to generate.batch.max_requests (50000)")
		if got != tt.warn {
			t.Errorf("concurrency %s: warned %v, want %v:\n%s", tt.concurrency, got, tt.warn, stderr.String())
		}
	}
}
