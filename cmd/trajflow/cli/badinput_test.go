package cli_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pq "github.com/parquet-go/parquet-go"

	"github.com/trajflow/trajflow/cmd/trajflow/cli"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
	"github.com/trajflow/trajflow/schema"
)

// badHarness holds what the bad-input cases share: a scratch directory, a
// small valid input, the committed output of a good run, and the output
// directory of the case being run.
type badHarness struct {
	t     *testing.T
	dir   string // the test's scratch directory
	tasks string // a valid JSONL input of 4 rows
	good  string // committed output of a good quickstart run (never written)
	out   string // this case's output directory
	n     int
}

// file writes body to a new file of the scratch directory and returns its path.
func (h *badHarness) file(name string, body []byte) string {
	h.t.Helper()
	h.n++
	d := filepath.Join(h.dir, "f"+strconv.Itoa(h.n))
	if err := os.MkdirAll(d, 0o755); err != nil {
		h.t.Fatal(err)
	}
	p := filepath.Join(d, name)
	if err := os.WriteFile(p, body, 0o644); err != nil {
		h.t.Fatal(err)
	}
	return p
}

// config writes a config reading input (h.tasks when empty) into h.out,
// followed by the YAML sections in body, and a prompt section unless body
// has one.
func (h *badHarness) config(input, body string) string {
	if !strings.Contains(body, "prompt:") {
		body += "prompt: {user: \"Solve: {question}\"}\n"
	}
	return h.configRaw(input, body)
}

// configRaw is config without the prompt section: rows carry messages.
func (h *badHarness) configRaw(input, body string) string {
	if input == "" {
		input = h.tasks
	}
	return h.file("cfg.yaml", []byte("source: {path: "+strconv.Quote(input)+"}\noutput: {dir: "+strconv.Quote(h.out)+"}\n"+body))
}

// quick is the good run's command line (the quickstart example), into h.out.
func (h *badHarness) quick(extra ...string) []string {
	return append([]string{"examples/quickstart/config.yaml", "--set", "source.limit=6",
		"--set", "generate.sim.time_scale=0", "--set", "output.dir=" + h.out}, extra...)
}

// rows is JSONL of n valid rows for the math environment.
func rows(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(`{"question": "` + strconv.Itoa(i) + `+1", "expected_answer": "` + strconv.Itoa(i+1) + `"}` + "\n")
	}
	return b.String()
}

// gz compresses s.
func gz(s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

// hashTree maps every file under dir (relative path) to its SHA-256.
func hashTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		s := sha256.Sum256(b)
		m[rel] = hex.EncodeToString(s[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// copyTree copies the directory src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// server serves h on a local port for the test's duration.
func server(t *testing.T, h http.HandlerFunc) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestBadInputCatalogue runs trajflow on the bad inputs a new user could
// give (config files and flags, input data, environments, inference
// endpoints, output directories) and checks for each the exit code, a
// message naming where the problem is (file and line, key, row, endpoint),
// no panic, and, for the cases run against an output directory holding a
// good run's committed data, that every file under data/ is unchanged
// byte for byte. docs/reliability.md ("Bad input") summarises it.
func TestBadInputCatalogue(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	t.Chdir(root)
	h := &badHarness{t: t, dir: t.TempDir()}
	h.tasks = h.file("tasks.jsonl", []byte(rows(4)))

	// The committed output of a good run, copied for each case that needs it.
	h.good = filepath.Join(h.dir, "good")
	h.out = h.good
	var stdout, stderr bytes.Buffer
	if code := cli.Main(append([]string{"run", "-q"}, h.quick()...), &stdout, &stderr); code != cli.ExitOK {
		t.Fatalf("good run: exit %d\n%s%s", code, &stdout, &stderr)
	}
	goodData := hashTree(t, filepath.Join(h.good, "data"))
	if len(goodData) == 0 {
		t.Fatal("the good run committed nothing")
	}

	// Servers an inference endpoint may be.
	refuseKey := server(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error": {"message": "invalid api key"}}`, http.StatusUnauthorized)
	})
	notFound := server(t, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	otherModel := server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object": "list", "data": [{"id": "llama-3-8b", "object": "model"}]}`)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error": {"message": "The model `+"`sim-math`"+` does not exist."}}`)
	})
	// A vLLM-shaped server with a 512-token context (the simulator).
	short := sim.New(sim.Options{Seed: 3, Model: "sim-math", MaxModelLen: 512})
	t.Cleanup(short.Close)
	shortCtx := server(t, short.Handler().ServeHTTP)
	// A server that moved: every path redirects.
	moved := server(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://new.example.com"+r.URL.Path, http.StatusFound)
	})
	// Servers whose answers are wrong: negative token counts, and a 200
	// carrying an error object.
	answering := func(body string) string {
		return server(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/models" {
				io.WriteString(w, `{"object": "list", "data": [{"id": "sim-math", "object": "model"}]}`)
				return
			}
			io.WriteString(w, body)
		})
	}
	negTokens := answering(`{"choices": [{"message": {"role": "assistant", "content": "2"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 9, "completion_tokens": -5}}`)
	errorIn200 := answering(`{"error": {"message": "engine overloaded, try later", "type": "InternalServerError"}}`)
	// An environment whose rewards are not numbers a run can keep: 1e308
	// for task 0 ("0+1"), NaN (not JSON) for task 1 ("1+1"), 1 otherwise.
	badRewards := h.file("env.py", []byte(`import json, sys
for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "reset":
        resp = {"id": req["id"]}
    else:
        q = req["messages"][0]["content"]
        reward = 1e308 if q.endswith(" 0+1") else float("nan") if q.endswith(" 1+1") else 1.0
        resp = {"id": req["id"], "reward": reward, "terminated": True}
    print(json.dumps(resp), flush=True)
`))
	// A port nothing listens on.
	closed := httptest.NewServer(http.NotFoundHandler())
	unreachable := closed.URL
	closed.Close()
	// An environment server that is not there.
	deadEnv := unreachable

	// A Parquet input with the given rows.
	parquetFile := func(name string, rows any) string {
		p := filepath.Join(h.dir, name)
		var err error
		switch rs := rows.(type) {
		case []struct {
			Question       int64  `parquet:"question"`
			ExpectedAnswer string `parquet:"expected_answer"`
			Messages       int64  `parquet:"messages"`
		}:
			err = pq.WriteFile(p, rs)
		case []struct {
			Question       string `parquet:"question"`
			ExpectedAnswer string `parquet:"expected_answer"`
		}:
			err = pq.WriteFile(p, rs)
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	type goodRow = struct {
		Question       string `parquet:"question"`
		ExpectedAnswer string `parquet:"expected_answer"`
	}
	type oddRow = struct {
		Question       int64  `parquet:"question"`
		ExpectedAnswer string `parquet:"expected_answer"`
		Messages       int64  `parquet:"messages"`
	}
	validParquet := parquetFile("good.parquet", []goodRow{{"1+1", "2"}, {"2+2", "4"}, {"3+3", "6"}})
	vp, _ := os.ReadFile(validParquet)
	oddParquet := parquetFile("odd.parquet", []oddRow{{1, "2", 5}, {2, "3", 6}})

	const (
		catConfig = "config"
		catInput  = "input"
		catEnv    = "env"
		catInfer  = "inference"
		catOutput = "output"
	)
	tests := []struct {
		cat, name string
		// args are the arguments after "run"; h.out is this case's
		// output directory when it is called.
		args func() []string
		code int
		want []string // in stderr (or stdout for exit 0)
		// onGood runs the case against a copy of the good run's output:
		// data/ must be unchanged afterwards.
		onGood bool
		// found is an exit 2 found while reading the input (a line over
		// source.max_line_bytes): the output directory may exist.
		found bool
		// slow cases are skipped under -short.
		slow bool
		// check, when set, looks at the output directory afterwards.
		check func(t *testing.T)
	}{
		// --- config files and flags ---
		{cat: catConfig, name: "YAML syntax error", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "repeat: {n: 2\nenv: {name: math}\n")} },
			want: []string{"cfg.yaml", "line"}},
		{cat: catConfig, name: "tab indentation", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "repeat:\n\tn: 2\n")} },
			want: []string{"cfg.yaml", "line 4"}},
		{cat: catConfig, name: "wrong type: n is a word", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "repeat:\n  n: four\n")} },
			want: []string{"cfg.yaml: line 4", "repeat.n"}},
		{cat: catConfig, name: "wrong type: section is a list", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "generate:\n  - sim://\n")} },
			want: []string{"cfg.yaml: line 4", "generate"}},
		{cat: catConfig, name: "wrong type: endpoints is a string", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "generate: {endpoints: 5}\n")} },
			want: []string{"cfg.yaml: line 3", "generate.endpoints"}},
		{cat: catConfig, name: "unknown section", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "repaet: {n: 2}\n")} },
			want: []string{"cfg.yaml: line 3", "repaet"}},
		{cat: catConfig, name: "unknown key", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "groups:\n  keep: all\n  targett: 3\n")} },
			want: []string{"cfg.yaml: line 5", "groups.targett: unknown key"}},
		{cat: catConfig, name: "bad value: groups.keep", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "groups: {keep: sometimes}\n")} },
			want: []string{"cfg.yaml: line 3", "groups.keep", "sometimes"}},
		{cat: catConfig, name: "bad value: negative limit", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", ""), "--set", "source.limit=-1"} },
			want: []string{"source.limit"}},
		{cat: catConfig, name: "bad value: shard index past count", code: cli.ExitUsage,
			args: func() []string {
				return []string{h.config("", "run: {id: x}\n"), "--set", "source.shard={index: 3, count: 2}"}
			},
			want: []string{"source.shard"}},
		{cat: catConfig, name: "bad value: compression", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", ""), "--set", "output.compression=lz4"} },
			want: []string{"--set output.compression=lz4", "output.compression", "lz4"}},
		{cat: catConfig, name: "bad value: on_bad_row", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "run: {id: x}\n"), "--set", "source.on_bad_row=ignore"} },
			want: []string{"--set source.on_bad_row=ignore", "source.on_bad_row"}},
		{cat: catConfig, name: "bad duration: a list", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "run: {grace: [30s]}\n")} },
			want: []string{"cfg.yaml: line 3", "run.grace", "want a duration"}},
		{cat: catConfig, name: "bad duration: beyond the maximum", code: cli.ExitUsage,
			args: func() []string {
				return []string{h.config("", "run: {id: x}\n"), "--set", "output.commit_interval=48h"}
			},
			want: []string{"--set output.commit_interval=48h", "output.commit_interval"}},
		{cat: catConfig, name: "bad duration: unknown unit", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "generate:\n  timeout: 5 minutes\n")} },
			want: []string{"cfg.yaml: line 4", `generate.timeout: "5 minutes" is not a duration`}},
		{cat: catConfig, name: "bad duration: negative", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", ""), "--set", "output.commit_interval=-1m"} },
			want: []string{"output.commit_interval"}},
		{cat: catConfig, name: "--set without =", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", ""), "--set", "repeat.n"} },
			want: []string{`--set "repeat.n": want section.key=value`}},
		{cat: catConfig, name: "--set without a section", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", ""), "--set", "n=3"} },
			want: []string{"--set n=3"}},
		{cat: catConfig, name: "--set unknown section", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", ""), "--set", "outptu.dir=x"} },
			want: []string{"--set outptu.dir=x", "outptu"}},
		{cat: catConfig, name: "--set wrong type", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", ""), "--set", "repeat.n=[1,2]"} },
			want: []string{"--set repeat.n=[1,2]", "repeat.n"}},
		{cat: catConfig, name: "--set unbalanced quoting", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", ""), "--set", `prompt.user="Solve: {question}`} },
			want: []string{`--set prompt.user="Solve: {question}: the value is not valid YAML`, `--set 'prompt.user="Solve: {question}"'`}},
		{cat: catConfig, name: "--set value needing quotes", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", ""), "--set", "prompt.system=Note: be brief"} },
			want: []string{"--set prompt.system=Note: be brief", `--set 'prompt.system="Note: be brief"'`}},
		{cat: catConfig, name: "--set with nothing after it", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", ""), "--set"} },
			want: []string{"--set needs section.key=value"}},
		{cat: catConfig, name: "missing config file", code: cli.ExitUsage,
			args: func() []string { return []string{filepath.Join(h.dir, "nope.yaml")} },
			want: []string{"nope.yaml"}},
		{cat: catConfig, name: "config is a directory", code: cli.ExitUsage,
			args: func() []string { return []string{h.dir} },
			want: []string{h.dir, "directory"}},
		{cat: catConfig, name: "empty config file", code: cli.ExitUsage,
			args: func() []string { return []string{h.file("empty.yaml", nil)} },
			want: []string{"source.path"}},
		{cat: catConfig, name: "config is a list", code: cli.ExitUsage,
			args: func() []string { return []string{h.file("list.yaml", []byte("- source\n- output\n"))} },
			want: []string{"list.yaml: line 1"}},
		{cat: catConfig, name: "template with unknown placeholder syntax", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "prompt:\n  user: \"Solve: {question\"\n")} },
			want: []string{"cfg.yaml: line 4", "prompt.user", "unterminated"}},
		{cat: catConfig, name: "unsupported input extension", code: cli.ExitUsage,
			args: func() []string { return []string{h.config(h.file("tasks.csv", []byte("question\n1+1\n")), "")} },
			want: []string{"tasks.csv"}},

		{cat: catConfig, name: "repeat.n beyond its bound", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "repeat:\n  n: 100000000\n")} },
			want: []string{"cfg.yaml: line 4", "repeat.n: must be at most 65536"}},
		{cat: catConfig, name: "generate.concurrency beyond its bound", code: cli.ExitUsage, onGood: true,
			args: func() []string { return h.quick("--set", "generate.concurrency=1000000000") },
			want: []string{"--set generate.concurrency=1000000000", "generate.concurrency: must be between 1 and 65536"}},
		{cat: catConfig, name: "generate.timeout NaN", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "generate:\n  timeout: NaN\n")} },
			want: []string{"cfg.yaml: line 4", `generate.timeout: "NaN" is not a duration`}},
		{cat: catConfig, name: "generate.timeout 1e300", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "generate:\n  timeout: 1e300\n")} },
			want: []string{"cfg.yaml: line 4", `generate.timeout: "1e300" is not a duration`, "at most 1e+09"}},
		{cat: catConfig, name: "source.max_line_bytes beyond 2 GiB", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "source: {max_line_bytes: 4294967296}\n")} },
			want: []string{"source.max_line_bytes"}},

		// --- input data ---
		{cat: catInput, name: "line over source.max_line_bytes", code: cli.ExitUsage,
			args: func() []string {
				long := `{"question": "` + strings.Repeat("9", 200<<10) + `", "expected_answer": "1"}` + "\n"
				return []string{h.config(h.file("t.jsonl", []byte(rows(1)+long+rows(1))), ""), "--set", "source.max_line_bytes=65536"}
			},
			want: []string{"t.jsonl:2", "longer than source.max_line_bytes (65536 bytes)", "raise source.max_line_bytes"}, found: true},
		{cat: catInput, name: "line over source.max_line_bytes, over committed data", code: cli.ExitUsage, onGood: true,
			args: func() []string {
				long := `{"question": "` + strings.Repeat("9", 200<<10) + `", "expected_answer": "1"}` + "\n"
				return h.quick("--allow-config-change", "--set", "source.path="+h.file("t.jsonl", []byte(rows(1)+long+rows(1))), "--set", "source.max_line_bytes=65536")
			},
			want: []string{"t.jsonl:2", "raise source.max_line_bytes"}},
		{cat: catInput, name: "line over source.max_line_bytes, on_bad_row skip", code: cli.ExitOK,
			args: func() []string {
				long := `{"question": "` + strings.Repeat("9", 200<<10) + `", "expected_answer": "1"}` + "\n"
				return []string{h.config(h.file("t.jsonl", []byte(rows(1)+long+rows(1))), ""), "--set", "source.max_line_bytes=65536", "--set", "source.on_bad_row=skip"}
			},
			want: []string{"bad rows skipped: 1"},
			check: func(t *testing.T) {
				b, err := os.ReadFile(filepath.Join(h.out, schema.RejectsFile))
				if err != nil || !strings.Contains(string(b), "t.jsonl:2") || len(b) > 8<<10 {
					t.Errorf("rejects.jsonl (%d bytes, %v) lacks t.jsonl:2 or holds the whole line", len(b), err)
				}
			}},
		{cat: catInput, name: "row seed beyond 64 bits", code: cli.ExitFailed,
			args: func() []string {
				return []string{h.configRaw(h.file("t.jsonl", []byte(`{"responses_create_params": {"input": "2+2?", "seed": 99999999999999999999}, "expected_answer": "4"}`+"\n")), "")}
			},
			want: []string{"t.jsonl:1", "responses_create_params.seed: 99999999999999999999 is not a 64-bit integer"}},

		{cat: catInput, name: "invalid JSON line", code: cli.ExitFailed,
			args: func() []string {
				return []string{h.config(h.file("t.jsonl", []byte(rows(2)+"{\"question\": \"3+3\",}\n"+rows(1))), "")}
			},
			want: []string{"t.jsonl:3"}},
		{cat: catInput, name: "invalid JSON line, on_bad_row skip", code: cli.ExitOK,
			args: func() []string {
				return []string{h.config(h.file("t.jsonl", []byte(rows(2)+"{oops\n"+rows(1))), ""), "--set", "source.on_bad_row=skip"}
			},
			want: []string{"rejects"},
			check: func(t *testing.T) {
				b, err := os.ReadFile(filepath.Join(h.out, schema.RejectsFile))
				if err != nil || !strings.Contains(string(b), "t.jsonl:3") {
					t.Errorf("rejects.jsonl lacks t.jsonl:3 (%v):\n%s", err, b)
				}
			}},
		{cat: catInput, name: "row that is not an object", code: cli.ExitFailed,
			args: func() []string { return []string{h.config(h.file("t.jsonl", []byte(rows(1)+"[1, 2]\n")), "")} },
			want: []string{"t.jsonl:2"}},
		{cat: catInput, name: "row that is a string, on_bad_row skip", code: cli.ExitOK,
			args: func() []string {
				return []string{h.config(h.file("t.jsonl", []byte(`"hello"`+"\n"+rows(2))), ""), "--set", "source.on_bad_row=skip"}
			},
			want: []string{"rejects"}},
		{cat: catInput, name: "missing template field", code: cli.ExitFailed,
			args: func() []string {
				return []string{h.config(h.file("t.jsonl", []byte(rows(1)+`{"q": "2+2", "expected_answer": "4"}`+"\n")), "prompt: {user: \"Solve: {question}\"}\n")}
			},
			want: []string{"t.jsonl:2", "question"}},
		{cat: catInput, name: "bad messages shape", code: cli.ExitFailed,
			args: func() []string {
				return []string{h.configRaw(h.file("t.jsonl", []byte(`{"messages": [1, 2], "expected_answer": "4"}`+"\n")), "")}
			},
			want: []string{"t.jsonl:1", "messages"}},
		{cat: catInput, name: "message without a role", code: cli.ExitFailed,
			args: func() []string {
				return []string{h.configRaw(h.file("t.jsonl", []byte(`{"messages": [{"content": "2+2"}], "expected_answer": "4"}`+"\n")), "")}
			},
			want: []string{"t.jsonl:1", "role"}},
		{cat: catInput, name: "empty file", code: cli.ExitFailed,
			args: func() []string { return []string{h.config(h.file("t.jsonl", nil), "")} },
			want: []string{"t.jsonl", "empty"}},
		{cat: catInput, name: "blank lines only", code: cli.ExitFailed,
			args: func() []string { return []string{h.config(h.file("t.jsonl", []byte("\n  \n\r\n\n")), "")} },
			want: []string{"t.jsonl: no rows (only blank lines)"}},
		{cat: catInput, name: "gzip that is not gzip", code: cli.ExitFailed,
			args: func() []string {
				return []string{h.config(h.file("t.jsonl.gz", append([]byte{0x1f, 0x8b}, rows(2)...)), "")}
			},
			want: []string{"t.jsonl.gz"}},
		{cat: catInput, name: "truncated gzip", code: cli.ExitFailed,
			args: func() []string {
				b := gz(rows(200))
				return []string{h.config(h.file("t.jsonl.gz", b[:len(b)/2]), "")}
			},
			want: []string{"t.jsonl.gz"}},
		{cat: catInput, name: "invalid UTF-8 is repaired and named", code: cli.ExitOK,
			args: func() []string {
				return []string{h.config(h.file("t.jsonl", []byte(rows(1)+"{\"question\": \"caf\xe9\", \"expected_answer\": \"1\"}\n")), "")}
			},
			want: []string{"t.jsonl:2", "UTF-8"}},
		{cat: catInput, name: "huge invalid line", code: cli.ExitFailed, slow: true,
			args: func() []string {
				return []string{h.config(h.file("t.jsonl", []byte(rows(1)+"{\"question\": \""+strings.Repeat("x", 8<<20)+"\n")), "")}
			},
			want: []string{"t.jsonl:2"}},
		{cat: catInput, name: "input file missing", code: cli.ExitFailed,
			args: func() []string { return []string{h.config(filepath.Join(h.dir, "absent.jsonl"), "")} },
			want: []string{"absent.jsonl"}},
		{cat: catInput, name: "input is a directory", code: cli.ExitFailed,
			args: func() []string {
				d := filepath.Join(h.dir, "d.jsonl")
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				return []string{h.config(d, "")}
			},
			want: []string{"d.jsonl", "directory"}},
		{cat: catInput, name: "Parquet: not a Parquet file", code: cli.ExitFailed,
			args: func() []string { return []string{h.config(h.file("t.parquet", []byte(rows(3))), "")} },
			want: []string{"t.parquet"}},
		{cat: catInput, name: "Parquet: truncated file", code: cli.ExitFailed,
			args: func() []string { return []string{h.config(h.file("t.parquet", vp[:len(vp)-20]), "")} },
			want: []string{"t.parquet"}},
		{cat: catInput, name: "Parquet: wrong column types", code: cli.ExitFailed,
			args: func() []string { return []string{h.configRaw(oddParquet, "")} },
			want: []string{"odd.parquet", "messages"}},
		{cat: catInput, name: "Parquet: wrong column types, on_bad_row skip", code: cli.ExitOK,
			args: func() []string { return []string{h.configRaw(oddParquet, ""), "--set", "source.on_bad_row=skip"} },
			want: []string{"bad rows skipped: 2", "rejects.jsonl"}},

		// --- environments ---
		{cat: catEnv, name: "unknown environment", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "env: {name: maths}\n")} },
			want: []string{"cfg.yaml: line 3", `env.name: unknown environment "maths"`}},
		{cat: catEnv, name: "unknown environment option", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "env:\n  name: guess\n  answer_field: x\n")} },
			want: []string{"cfg.yaml: line 5", "env.answer_field"}},
		{cat: catEnv, name: "environment option of the wrong type", code: cli.ExitUsage,
			args: func() []string {
				return []string{h.config("", "env:\n  name: subprocess\n  command: python3 env.py\n")}
			},
			want: []string{"cfg.yaml: line 5", "env.command"}},
		{cat: catEnv, name: "bad max_turns", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "env: {name: math, max_turns: -1}\n")} },
			want: []string{"cfg.yaml: line 3", "env.max_turns"}},
		{cat: catEnv, name: "subprocess command not found", code: cli.ExitFailed,
			args: func() []string {
				return []string{h.config("", "env:\n  name: subprocess\n  command: [no-such-trajflow-env]\n  workers: 1\n")}
			},
			want: []string{"env.command", "no-such-trajflow-env"}},
		{cat: catEnv, name: "subprocess that crashes", code: cli.ExitErrors,
			args: func() []string {
				return []string{h.config("", "env:\n  name: subprocess\n  command: [sh, -c, 'read line; exit 3']\n  workers: 1\n")}
			},
			want: []string{"process exited (exit status 3)"}},
		{cat: catEnv, name: "subprocess that writes garbage", code: cli.ExitErrors,
			args: func() []string {
				return []string{h.config("", "env:\n  name: subprocess\n  command: [sh, -c, 'while read line; do echo garbage; done']\n  workers: 1\n")}
			},
			want: []string{`bad response line "garbage"`}},
		{cat: catEnv, name: "http environment unreachable", code: cli.ExitErrors,
			args: func() []string {
				return []string{h.config("", "env:\n  name: http\n  url: "+deadEnv+"\n  max_attempts: 1\n")}
			},
			want: []string{deadEnv}},
		{cat: catEnv, name: "http environment URL without scheme", code: cli.ExitUsage,
			args: func() []string { return []string{h.config("", "env:\n  name: http\n  url: localhost:9\n")} },
			want: []string{"cfg.yaml: line 5", "env.url"}},

		{cat: catEnv, name: "first prompt over env.max_seq_len", code: cli.ExitErrors,
			args: func() []string {
				return []string{h.config("", "env: {name: math, max_seq_len: 8}\nrun: {max_error_rate: 1}\n")}
			},
			want:  []string{"no kept rollout generated a token", "prompt_too_long=4", "max_seq_len 8 leaves no room to generate"},
			check: func(t *testing.T) { noEmptyOK(t, h.out) }},
		{cat: catEnv, name: "rewards 1e308 and NaN", code: cli.ExitOK,
			args: func() []string {
				return []string{h.config("", "env:\n  name: subprocess\n  command: [python3, "+strconv.Quote(badRewards)+"]\n  workers: 1\nrun: {max_error_rate: 1}\n")}
			},
			want: []string{"errors by class: env=2"},
			check: func(t *testing.T) {
				rows := readRows(t, filepath.Join(h.out, schema.ErrorsDir))
				var big, nan bool
				for _, r := range rows {
					big = big || strings.Contains(r.Error, "reward: 1e+308 is out of range")
					nan = nan || strings.Contains(r.Error, "NaN")
				}
				if !big || !nan {
					t.Errorf("error rows do not name the rewards: %v", rows)
				}
				// Nothing non-finite was committed: stats and report work.
				var out, errb bytes.Buffer
				if code := cli.Main([]string{"stats", "--json", h.out}, &out, &errb); code != cli.ExitOK || strings.Contains(out.String(), "Inf") {
					t.Errorf("stats --json: exit %d\n%s%s", code, &out, &errb)
				}
				if code := cli.Main([]string{"report", h.out}, &out, &errb); code != cli.ExitOK {
					t.Errorf("report: exit %d\n%s", code, &errb)
				}
			}},

		// --- inference endpoints (against committed data) ---
		{cat: catInfer, name: "endpoint unreachable", code: cli.ExitErrors, onGood: true,
			args: func() []string { return h.quick("--set", "generate.endpoints=["+unreachable+"/v1]") },
			want: []string{unreachable}},
		{cat: catInfer, name: "endpoint refuses the key (401)", code: cli.ExitErrors, onGood: true,
			args: func() []string { return h.quick("--set", "generate.endpoints=["+refuseKey+"/v1]") },
			want: []string{refuseKey, "401", "api_key_env"}},
		{cat: catInfer, name: "wrong model (404)", code: cli.ExitErrors, onGood: true,
			args: func() []string { return h.quick("--set", "generate.endpoints=["+otherModel+"/v1]") },
			want: []string{otherModel, "sim-math", "llama-3-8b"}},
		{cat: catInfer, name: "base URL without /v1 (404)", code: cli.ExitErrors, onGood: true,
			args: func() []string { return h.quick("--set", "generate.endpoints=["+notFound+"]") },
			want: []string{notFound, "404"}},
		{cat: catInfer, name: "endpoint that is not a URL", code: cli.ExitUsage, onGood: true,
			args: func() []string { return h.quick("--set", "generate.endpoints=[localhost:8000]") },
			want: []string{"generate.endpoints", "localhost:8000"}},
		{cat: catInfer, name: "unknown generate.api", code: cli.ExitUsage, onGood: true,
			args: func() []string { return h.quick("--set", "generate.api=chatty") },
			want: []string{"--set generate.api=chatty", "generate.api"}},

		{cat: catInfer, name: "context too short for max_tokens (vLLM 400)", code: cli.ExitErrors,
			args: func() []string {
				return h.quick("--set", "generate.endpoints=["+shortCtx+"/v1]", "--set", "generate.params.max_tokens=512")
			},
			want:  []string{"too many rollouts failed", "context_length=", "maximum context length is 512 tokens"},
			check: func(t *testing.T) { noEmptyOK(t, h.out) }},
		{cat: catInfer, name: "context too short, every row failing", code: cli.ExitErrors,
			args: func() []string {
				return h.quick("--set", "generate.endpoints=["+shortCtx+"/v1]", "--set", "generate.params.max_tokens=512", "--set", "run.max_error_rate=1")
			},
			want: []string{"no kept rollout generated a token", "context_length=24"},
			check: func(t *testing.T) {
				noEmptyOK(t, h.out)
				b, err := os.ReadFile(filepath.Join(h.out, schema.FailuresFile))
				if err != nil || strings.Count(string(b), `"error_class":"context_length"`) != 24 {
					t.Errorf("failures.jsonl (%v):\n%s", err, b)
				}
			}},
		{cat: catInfer, name: "endpoint redirects (302)", code: cli.ExitErrors, onGood: true,
			args: func() []string { return h.quick("--set", "generate.endpoints=["+moved+"/v1]") },
			want: []string{moved + "/v1/models", "redirects (HTTP 302) to https://new.example.com/v1/models"}},
		{cat: catInfer, name: "negative token counts", code: cli.ExitErrors,
			args: func() []string { return h.quick("--set", "generate.endpoints=["+negTokens+"/v1]") },
			want: []string{"bad_response", "usage.completion_tokens: -5 is out of range"}},
		{cat: catInfer, name: "200 carrying an error object", code: cli.ExitErrors,
			args: func() []string { return h.quick("--set", "generate.endpoints=["+errorIn200+"/v1]") },
			want: []string{"the server's error: engine overloaded, try later"}},

		// --- output directories ---
		{cat: catOutput, name: "output.dir is a file", code: cli.ExitFailed,
			args: func() []string {
				f := h.file("out", []byte("x"))
				h.out = f
				return []string{h.config("", "")}
			},
			want: []string{"output.dir", "out"}},
		{cat: catOutput, name: "output.dir cannot be created", code: cli.ExitFailed,
			args: func() []string {
				h.out = "/proc/trajflow-out"
				return []string{h.config("", "")}
			},
			want: []string{"output.dir", "/proc/trajflow-out"}},
		{cat: catOutput, name: "output.dir locked by another run", code: cli.ExitFailed, onGood: true,
			args: func() []string {
				f, err := os.OpenFile(filepath.Join(h.out, schema.LockFile), os.O_CREATE|os.O_RDWR, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.Close() })
				return h.quick()
			},
			want: []string{"in use by another trajflow run"}},
		{cat: catOutput, name: "resume with another config", code: cli.ExitFailed, onGood: true,
			args: func() []string { return h.quick("--set", "repeat.n=2") },
			want: []string{"repeat.n", "--allow-config-change"}},
		{cat: catOutput, name: "resume with another input file", code: cli.ExitFailed, onGood: true,
			args: func() []string { return h.quick("--set", "source.path="+h.tasks) },
			want: []string{"source.path", "tasks.jsonl"}},
		{cat: catOutput, name: "resume with a corrupt part file in data/", code: cli.ExitFailed, onGood: true,
			args: func() []string {
				if err := os.WriteFile(filepath.Join(h.out, "data", "part-99999.parquet"), []byte("not parquet"), 0o644); err != nil {
					t.Fatal(err)
				}
				return h.quick()
			},
			want: []string{"part-99999.parquet"}},
		{cat: catOutput, name: "arrow_stream into a missing directory", code: cli.ExitFailed,
			args: func() []string {
				return []string{h.config("", ""), "--set", "output.arrow_stream=/nonexistent/dir/x.arrows"}
			},
			want: []string{"output.arrow_stream", "/nonexistent/dir/"}},
	}
	counts := map[string]int{}
	start := time.Now()
	for _, tt := range tests {
		counts[tt.cat]++
		t.Run(tt.cat+"/"+tt.name, func(t *testing.T) {
			if tt.slow && testing.Short() {
				t.Skip("slow: the full suite runs it")
			}
			caseDir := t.TempDir()
			h.out = filepath.Join(caseDir, "out")
			if tt.onGood {
				copyTree(t, h.good, h.out)
			}
			args := tt.args() // may plant files in h.out
			var before map[string]string
			if tt.onGood {
				before = hashTree(t, filepath.Join(h.out, "data"))
			}
			var stdout, stderr bytes.Buffer
			code := cli.Main(append([]string{"run", "-q"}, args...), &stdout, &stderr)
			msg := stderr.String()
			if code == cli.ExitOK {
				msg = stdout.String() + msg
			}
			t.Logf("exit %d: %s", code, strings.TrimSpace(stderr.String()))
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, &stdout, &stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, "panic") || strings.Contains(msg, "goroutine ") {
				t.Errorf("a panic:\n%s", msg)
			}
			if strings.Contains(msg, "source: source:") || strings.Contains(msg, "gzip: gzip:") {
				t.Errorf("a repeated prefix:\n%s", msg)
			}
			if code != cli.ExitOK && len(msg) > 4096 {
				t.Errorf("a message of %d bytes", len(msg))
			}
			if tt.onGood {
				after := hashTree(t, filepath.Join(h.out, "data"))
				if len(after) != len(before) {
					t.Errorf("data/ held %d files, now %d", len(before), len(after))
				}
				for f, sum := range before {
					if after[f] != sum {
						t.Errorf("data/%s changed", f)
					}
				}
			}
			if code == cli.ExitUsage && !tt.onGood && !tt.found {
				if _, err := os.Stat(h.out); !os.IsNotExist(err) && h.out != "/proc/trajflow-out" {
					t.Errorf("a config error created the output directory (stat: %v)", err)
				}
			}
			if tt.check != nil {
				tt.check(t)
			}
		})
	}
	if len(tests) < 40 {
		t.Errorf("%d cases, want at least 40", len(tests))
	}
	t.Logf("%d cases (%v) in %v", len(tests), counts, time.Since(start).Round(time.Millisecond))
	if after := hashTree(t, filepath.Join(h.good, "data")); len(after) != len(goodData) {
		t.Error("the good run's data changed")
	}
}

// noEmptyOK fails when a committed data row is ok with 0 generated tokens.
func noEmptyOK(t *testing.T, out string) {
	t.Helper()
	if files, _ := filepath.Glob(filepath.Join(out, schema.DataDir, "*.parquet")); len(files) == 0 {
		return
	}
	for _, r := range readRows(t, filepath.Join(out, schema.DataDir)) {
		if r.Status == pipeline.StatusOK && r.CompletionTokens == 0 {
			t.Errorf("%s: an ok row with 0 generated tokens", r)
		}
	}
}

// readRows reads every row of a folder of part files.
func readRows(t *testing.T, dir string) []*pipeline.Rollout {
	t.Helper()
	rs, err := readback.Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}
