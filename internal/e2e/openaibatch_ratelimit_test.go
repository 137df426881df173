package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
	"github.com/trajflow/trajflow/schema"
)

// replyRecorder is a simulator (rate-limited, say) behind an HTTP server
// that sends each chat reply indented, with a field holding <, > and &,
// gives it an x-request-id of its own and keeps the bytes it sent under
// that id. Read replies after counts, once the run is over.
type replyRecorder struct {
	sim *sim.Server
	url string

	mu      sync.Mutex
	chat    int               // chat requests received, refused ones too
	replies map[string][]byte // x-request-id -> body of a 200 reply
}

func startReplyRecorder(t *testing.T, opts sim.Options) *replyRecorder {
	t.Helper()
	rec := &replyRecorder{sim: sim.New(opts), replies: map[string][]byte{}}
	h := rec.sim.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			h.ServeHTTP(w, r)
			return
		}
		rec.mu.Lock()
		rec.chat++
		id := fmt.Sprintf("req-%04d", rec.chat)
		rec.mu.Unlock()
		sw := httptest.NewRecorder()
		h.ServeHTTP(sw, r)
		body := sw.Body.Bytes()
		if sw.Code == http.StatusOK {
			// Sent as OpenAI's API sends it: indented, with HTML
			// characters unescaped (in a field the client does not read).
			var out bytes.Buffer
			body = append([]byte(`{"system_fingerprint":"fp_<a&b>",`), body[1:]...)
			if err := json.Indent(&out, body, "", "  "); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			body = out.Bytes()
			rec.mu.Lock()
			rec.replies[id] = body
			rec.mu.Unlock()
		}
		for k, v := range sw.Header() {
			w.Header()[k] = v
		}
		w.Header().Set("X-Request-Id", id)
		w.Header().Del("Content-Length")
		w.WriteHeader(sw.Code)
		w.Write(body)
	}))
	t.Cleanup(func() { ts.Close(); rec.sim.Close() })
	rec.url = ts.URL + "/v1"
	return rec
}

func (rec *replyRecorder) counts() (chat, replies int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.chat, len(rec.replies)
}

// batchLineOut is a line of the OpenAI Batch output or error files.
type batchLineOut struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct{ Code, Message string } `json:"error"`
}

// readBatchFiles reads out's openai_batch/ files of one kind (output or
// errors), in file order: the raw lines and their decoding.
func readBatchFiles(t *testing.T, out, kind string) ([]string, []batchLineOut) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(out, schema.OpenAIBatchDir, kind+"-*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	var raw []string
	var lines []batchLineOut
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l batchLineOut
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v: %s", p, err, sc.Bytes())
			}
			raw, lines = append(raw, sc.Text()), append(lines, l)
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	return raw, lines
}

// TestOpenAIBatchFileRateLimitedAndCached runs an OpenAI Batch file of 200
// chat requests and a few unsendable lines against a server that enforces
// a requests-per-minute limit and sends x-ratelimit-* headers. With
// generate.rate_limit at the server's limit under 2% are refused for rate,
// each retried; every good line has one output line whose body is the
// reply the server sent, every bad line one error line. A rerun into
// another directory with the same generate.cache sends nothing and writes
// the same rows and the same lines.
func TestOpenAIBatchFileRateLimitedAndCached(t *testing.T) {
	const good, rpm = 200, 6000 // 100 a second, a burst of 100
	dir := t.TempDir()
	badLines := map[string]string{
		"bad-url":         `{"custom_id":"bad-url","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"x"}}`,
		"bad-stream":      `{"custom_id":"bad-stream","method":"POST","url":"/v1/chat/completions","body":{"stream":true,"messages":[{"role":"user","content":"What is 1+1?"}]}}`,
		"bad-no-messages": `{"custom_id":"bad-no-messages","method":"POST","url":"/v1/chat/completions","body":{"max_tokens":8}}`,
		"bad-method":      `{"custom_id":"bad-method","method":"GET","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"What is 2+2?"}]}}`,
		"bad-no-prompt":   `{"custom_id":"bad-no-prompt","method":"POST","url":"/v1/completions","body":{"max_tokens":8}}`,
	}
	badIDs := make([]string, 0, len(badLines))
	for id := range badLines {
		badIDs = append(badIDs, id)
	}
	sort.Strings(badIDs)
	var in bytes.Buffer
	for i := range good {
		if i%40 == 20 { // a bad line among every 40 good ones
			in.WriteString(badLines[badIDs[i/40]] + "\n")
		}
		fmt.Fprintf(&in, `{"custom_id":"q-%03d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"What is %d+%d?"}],"max_tokens":64}}`+"\n", i, i, i%7)
	}
	input := filepath.Join(dir, "batch.jsonl")
	if err := os.WriteFile(input, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cacheDir := filepath.Join(dir, "cache")
	limited := fmt.Sprintf("  rate_limit: {requests_per_minute: %d}\n  cache: %q\n", rpm, cacheDir)
	config := func(name, endpoint, out, generate string) string {
		q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
		cfg := fmt.Sprintf(`run: {id: batch, progress: 0}
source: {path: %s, format: openai_batch}
generate:
  endpoints: [%s]
  model: sim-math
  concurrency: 64
  max_attempts: 8
  backoff_base: 20ms
  backoff_max: 2s
%soutput: {dir: %s, openai_batch: true, file_rows: 50}
`, q(input), q(endpoint), generate, q(out))
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	opts := sim.Options{Seed: 3, Model: "sim-math", RateLimit: sim.RateLimit{RequestsPerMinute: rpm, Window: time.Second}}

	// Without the limiter the server refuses many: the test can tell.
	srv0 := startReplyRecorder(t, opts)
	res := run(t, "run", config("free.yaml", srv0.url, filepath.Join(dir, "free"), ""))
	if res.code != 0 {
		t.Fatalf("run without a limit: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	free := srv0.sim.RateStats()
	t.Logf("without generate.rate_limit: %d accepted, %d refused for rate", free.Accepted, free.Limited)
	if free.Limited < good/10 {
		t.Fatalf("without generate.rate_limit the server refused only %d of %d: the workload does not test the limiter", free.Limited, free.Accepted)
	}

	srv1 := startReplyRecorder(t, opts)
	out1 := filepath.Join(dir, "first")
	res = run(t, "run", config("first.yaml", srv1.url, out1, limited))
	if res.code != 0 {
		t.Fatalf("first run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	st := srv1.sim.RateStats()
	chat, replies := srv1.counts()
	t.Logf("with generate.rate_limit: %d accepted, %d refused for rate (%.2f%%), %d chat requests", st.Accepted, st.Limited, 100*float64(st.Limited)/float64(st.Accepted), chat)
	if float64(st.Limited) >= 0.02*float64(st.Accepted) {
		t.Fatalf("%d requests refused for rate of %d accepted, want under 2%%", st.Limited, st.Accepted)
	}
	if st.Accepted != good || replies != good {
		t.Fatalf("the server accepted %d requests and answered %d, want %d (each refused one retried, no bad line sent)", st.Accepted, replies, good)
	}
	if !strings.Contains(res.stdout, fmt.Sprintf("response cache: 0 hits, %d misses", good)) {
		t.Fatalf("summary lacks the cache line:\n%s", res.stdout)
	}

	// Every good line has one output line: its custom_id, the server's
	// x-request-id and the reply the server sent under it, byte for byte.
	raw1, outLines := readBatchFiles(t, out1, schema.OpenAIBatchOutput)
	if len(outLines) != good {
		t.Fatalf("%d output lines, want %d", len(outLines), good)
	}
	answered := map[string]string{} // custom_id -> x-request-id
	usedReply := map[string]string{}
	for k, l := range outLines {
		if !strings.HasPrefix(l.CustomID, "q-") || l.Error != nil || l.Response == nil || l.Response.StatusCode != 200 {
			t.Fatalf("output line %s is not an answered good line", raw1[k])
		}
		if _, dup := answered[l.CustomID]; dup {
			t.Fatalf("custom_id %s has two output lines", l.CustomID)
		}
		if prev, dup := usedReply[l.Response.RequestID]; dup {
			t.Fatalf("%s and %s carry one reply, %q", prev, l.CustomID, l.Response.RequestID)
		}
		answered[l.CustomID], usedReply[l.Response.RequestID] = l.Response.RequestID, l.CustomID
		sent, ok := srv1.replies[l.Response.RequestID]
		if !ok {
			t.Fatalf("%s: request_id %q names no reply the server sent", l.CustomID, l.Response.RequestID)
		}
		// The reply as the server sent it, put on one line.
		var compact bytes.Buffer
		if err := json.Compact(&compact, sent); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(l.Response.Body, compact.Bytes()) {
			t.Fatalf("%s: body is not the server's reply:\n got %s\nsent %s", l.CustomID, l.Response.Body, compact.Bytes())
		}
	}
	// Every bad line has one error line, class invalid_request.
	rawErr1, errLines := readBatchFiles(t, out1, schema.OpenAIBatchErrors)
	if len(errLines) != len(badLines) {
		t.Fatalf("%d error lines, want %d:\n%s", len(errLines), len(badLines), strings.Join(rawErr1, "\n"))
	}
	for k, l := range errLines {
		if badLines[l.CustomID] == "" || l.Error == nil || l.Error.Code != "invalid_request" {
			t.Fatalf("error line %s is not a bad line's invalid_request", rawErr1[k])
		}
		delete(badLines, l.CustomID)
	}
	if len(badLines) != 0 {
		t.Fatalf("bad lines without an error line: %v", badLines)
	}

	// The rows: one per line, each good row's last message the content
	// of the reply on its line (named by the row's trajectory id).
	rows1, err := readback.Dir(filepath.Join(out1, "data"))
	if err != nil {
		t.Fatal(err)
	}
	errRows1, err := readback.Dir(filepath.Join(out1, "errors"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows1) != good || len(errRows1) != len(badIDs) {
		t.Fatalf("%d rows and %d error rows, want %d and %d", len(rows1), len(errRows1), good, len(badIDs))
	}
	byLineID := map[string]batchLineOut{}
	for _, l := range outLines {
		byLineID[l.ID] = l
	}
	for _, r := range rows1 {
		l, ok := byLineID["batch_req_"+r.TrajID]
		if !ok || r.Status != pipeline.StatusOK || len(r.Messages) == 0 {
			t.Fatalf("row %s (%s) has no output line", r.TrajID, r.Status)
		}
		var body struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(l.Response.Body, &body); err != nil || len(body.Choices) != 1 {
			t.Fatalf("%s: body %s: %v", l.CustomID, l.Response.Body, err)
		}
		if got := r.Messages[len(r.Messages)-1].Content; got != body.Choices[0].Message.Content {
			t.Fatalf("row %s ends with %q; its line %s has %q", r.TrajID, got, l.CustomID, body.Choices[0].Message.Content)
		}
	}

	// The rerun (another output directory, the same cache) sends nothing
	// and writes the same rows and the same lines.
	srv2 := startReplyRecorder(t, opts)
	out2 := filepath.Join(dir, "second")
	res = run(t, "run", config("second.yaml", srv2.url, out2, limited))
	if res.code != 0 {
		t.Fatalf("rerun: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if chat, _ := srv2.counts(); chat != 0 {
		t.Fatalf("the rerun sent %d chat requests, want 0", chat)
	}
	if !strings.Contains(res.stdout, fmt.Sprintf("response cache: %d hits, 0 misses", good)) {
		t.Fatalf("summary lacks the cache line:\n%s", res.stdout)
	}
	for _, d := range []string{"data", "errors"} {
		a, err := readback.Dir(filepath.Join(out1, d))
		if err != nil {
			t.Fatal(err)
		}
		b, err := readback.Dir(filepath.Join(out2, d))
		if err != nil {
			t.Fatal(err)
		}
		byTraj := func(rs []*pipeline.Rollout) {
			sort.Slice(rs, func(i, j int) bool { return rs[i].TrajID < rs[j].TrajID })
		}
		byTraj(a)
		byTraj(b)
		if len(a) != len(b) {
			t.Fatalf("%s: rerun has %d rows, want %d", d, len(b), len(a))
		}
		for i := range a {
			if da, db := deterministic(a[i]), deterministic(b[i]); !reflect.DeepEqual(da, db) {
				t.Fatalf("%s: row %d differs on the rerun:\n%+v\n%+v", d, i, da, db)
			}
		}
	}
	// Rows land in parts in the order they finish, which differs between
	// the runs: the lines are compared by custom_id, byte for byte.
	for _, kind := range []string{schema.OpenAIBatchOutput, schema.OpenAIBatchErrors} {
		a, al := readBatchFiles(t, out1, kind)
		b, bl := readBatchFiles(t, out2, kind)
		if len(a) != len(b) {
			t.Fatalf("%s: the rerun wrote %d lines, want %d", kind, len(b), len(a))
		}
		first := map[string]string{}
		for i, l := range al {
			first[l.CustomID] = a[i]
		}
		for i, l := range bl {
			if first[l.CustomID] != b[i] {
				t.Fatalf("%s: %s differs on the rerun:\n%s\n%s", kind, l.CustomID, first[l.CustomID], b[i])
			}
		}
	}
}
