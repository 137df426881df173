package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/schema"
)

// A run of an OpenAI Batch file with output.openai_batch, killed with
// SIGKILL again and again and resumed, ends with exactly one output or
// error line per input line: each good line's body the reply the server
// sent for it, each bad line an error; every OpenAI Batch file beside a
// committed part, holding as many lines as the part has rows.
func TestOpenAIBatchCrashResume(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: several seconds of runs (skipped under -short)")
	}
	const lines, kills = 2500, 6
	var requests atomic.Int64
	reply := func(prompt string) []byte {
		return fmt.Appendf(nil, `{"id":"chatcmpl-%s","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"answer to %s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}`, prompt, prompt)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Write([]byte(`{"object":"list","data":[{"id":"m"}]}`))
			return
		}
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &req) != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", 400)
			return
		}
		requests.Add(1)
		time.Sleep(3 * time.Millisecond)
		w.Header().Set("X-Request-Id", "req")
		w.Write(reply(req.Messages[len(req.Messages)-1].Content))
	}))
	defer srv.Close()

	dir := t.TempDir()
	var in bytes.Buffer
	bad := map[string]bool{}
	for i := range lines {
		id := fmt.Sprintf("line-%05d", i)
		switch {
		case i%97 == 5:
			bad[id] = true
			fmt.Fprintf(&in, `{"custom_id":%q,"method":"POST","url":"/v1/embeddings","body":{"input":"x"}}`+"\n", id)
		case i%131 == 7:
			bad[id] = true
			fmt.Fprintf(&in, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"stream":true,"messages":[{"role":"user","content":"q%d"}]}}`+"\n", id, i)
		default:
			fmt.Fprintf(&in, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"q%d"}],"max_tokens":8}}`+"\n", id, i)
		}
	}
	input := filepath.Join(dir, "batch.jsonl")
	if err := os.WriteFile(input, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	cfg := filepath.Join(dir, "batch.yaml")
	// max_error_rate off: every run redoes the bad lines' error rows, and
	// a final resume left with nothing else (the last kill landed after
	// every good line was committed) would fail them all and exit 4.
	yaml := fmt.Sprintf(`run: {id: batch, progress: 0, max_error_rate: 1}
source: {path: %q, format: openai_batch}
generate: {endpoints: [%q], model: m, concurrency: 8, price: {input_per_mtok: 1, output_per_mtok: 2}}
output: {dir: %q, openai_batch: true, file_rows: 100, batch_rows: 25}
`, input, srv.URL+"/v1", out)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewPCG(26, 1))
	data := filepath.Join(out, "data")
	landed := 0
	for k := range kills {
		want := len(parts(t, data)) + 1 + rng.IntN(2)
		killed, res := runAndKill(t, cfg, data, want, time.Duration(rng.IntN(200))*time.Millisecond)
		if !killed {
			if res.code != 0 {
				t.Fatalf("run %d exited %d before the kill:\n%s", k, res.code, res.stderr)
			}
			break
		}
		landed++
	}
	if landed == 0 {
		t.Fatal("no kill landed before its run finished")
	}
	final := run(t, "run", cfg)
	if final.code != 0 {
		t.Fatalf("final resume exited %d:\n%s%s", final.code, final.stdout, final.stderr)
	}

	// Every file of openai_batch/ is beside a committed part, and holds
	// as many lines as the part has rows; nothing staged is left.
	batchDir := filepath.Join(out, schema.OpenAIBatchDir)
	entries, err := os.ReadDir(batchDir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		var kind, dest string
		var n int
		switch {
		case strings.HasPrefix(name, schema.OpenAIBatchOutput+"-"):
			kind = schema.OpenAIBatchOutput
		case strings.HasPrefix(name, schema.OpenAIBatchErrors+"-"):
			kind = schema.OpenAIBatchErrors
		default:
			t.Fatalf("openai_batch/ holds %s", name)
		}
		rest := strings.TrimSuffix(strings.TrimPrefix(name, kind+"-"), ".jsonl")
		i := strings.LastIndexByte(rest, '-')
		dest = rest[:i]
		fmt.Sscanf(rest[i+1:], "%d", &n)
		part := filepath.Join(out, dest, schema.PartName(n))
		rows, _ := readFile(t, part, nopAlloc)
		wantLines := 0
		for _, r := range rows {
			if (r.Status == "ok") == (kind == schema.OpenAIBatchOutput) {
				wantLines++
			}
		}
		f, err := os.Open(filepath.Join(batchDir, name))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		got := 0
		for sc.Scan() {
			got++
			var l struct {
				CustomID string `json:"custom_id"`
				Response *struct {
					StatusCode int             `json:"status_code"`
					Body       json.RawMessage `json:"body"`
				} `json:"response"`
				Error *struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if prev, dup := seen[l.CustomID]; dup {
				t.Fatalf("custom_id %s has a line in %s and in %s", l.CustomID, prev, name)
			}
			seen[l.CustomID] = name
			if bad[l.CustomID] {
				if kind != schema.OpenAIBatchErrors || l.Error == nil || l.Error.Code != "invalid_request" {
					t.Fatalf("%s: bad line %s answered %s", name, l.CustomID, sc.Bytes())
				}
				continue
			}
			var i int
			fmt.Sscanf(l.CustomID, "line-%d", &i)
			if kind != schema.OpenAIBatchOutput || l.Response == nil || !bytes.Equal(l.Response.Body, reply(fmt.Sprintf("q%d", i))) {
				t.Fatalf("%s: %s: %s is not the server's reply", name, l.CustomID, sc.Bytes())
			}
		}
		f.Close()
		if got != wantLines {
			t.Fatalf("%s has %d lines; its part %s has %d such rows", name, got, part, wantLines)
		}
	}
	if len(seen) != lines {
		t.Fatalf("%d of %d input lines have a line in the OpenAI Batch files", len(seen), lines)
	}
	// The summary shows the cost, and stats the cost of every committed
	// row, the error rows of the bad lines included (they sent nothing): 9
	// prompt and 4 completion tokens a request.
	if !strings.Contains(final.stdout, "cost: ") {
		t.Errorf("the summary shows no cost:\n%s", final.stdout)
	}
	st := run(t, "stats", out)
	okRows := lines - len(bad)
	want := fmt.Sprintf("cost                      %.4g  (%d priced rows", float64(okRows*(9*1+4*2))/1e6, lines)
	split := fmt.Sprintf("data %d, errors %d rows)", okRows, len(bad))
	if st.code != 0 || !strings.Contains(st.stdout, want) || !strings.Contains(st.stdout, split) {
		t.Errorf("trajflow stats: want %q and %q in:\n%s%s", want, split, st.stdout, st.stderr)
	}
	t.Logf("%d kills landed; %d requests served for %d lines (%d bad)", landed, requests.Load(), lines, len(bad))
}
