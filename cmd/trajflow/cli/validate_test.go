package cli_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/cmd/trajflow/cli"
	"github.com/trajflow/trajflow/inference/sim"
)

// validate runs `trajflow validate` and checks that it created no output
// directory.
func validate(t *testing.T, out string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = cli.Main(append([]string{"validate"}, args...), &o, &e)
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("validate created %s (stat: %v)", out, err)
	}
	return code, o.String(), e.String()
}

// Every example validates offline: config, rendered rows, the simulator,
// the environment reset (python-env needs python3).
func TestValidateExamples(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	t.Chdir(root)
	configs, err := filepath.Glob("examples/*/config.yaml")
	if err != nil || len(configs) == 0 {
		t.Fatalf("no example configs: %v", err)
	}
	for _, c := range configs {
		name := filepath.Base(filepath.Dir(c))
		t.Run(name, func(t *testing.T) {
			if strings.Contains(readFile(t, c), "python3") {
				if _, err := exec.LookPath("python3"); err != nil {
					t.Skip("python3 not installed")
				}
			}
			out := filepath.Join(t.TempDir(), "out")
			code, stdout, stderr := validate(t, out, c, "--set", "output.dir="+out, "--rows", "2")
			if code != cli.ExitOK {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			want := []string{"config: ok", "row 0 (", "row 1 (", "  user: ", "params {", "reset on 2 row(s)", "ok: a run would start"}
			if strings.Contains(readFile(t, c), "name: agent") {
				// An agent writes its own prompts: nothing is rendered.
				want = []string{"config: ok", "row 0 (", "row 1 (", "goes to the agent (env agent), which writes its own prompts", "ok: a run would start"}
			}
			for _, w := range want {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			if strings.Contains(stdout, "row 2 (") {
				t.Errorf("--rows 2 rendered a third row:\n%s", stdout)
			}
		})
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A broken config exits 2, names each problem, and creates nothing.
func TestValidateBrokenConfigs(t *testing.T) {
	dir := t.TempDir()
	tasks := filepath.Join(dir, "t.jsonl")
	// The second row lacks the template's field.
	if err := os.WriteFile(tasks, []byte(`{"question": "What is 1 + 1?", "expected_answer": "2"}`+"\n"+`{"expected_answer": "3"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}`))
	}))
	defer refused.Close()
	t.Setenv("VALIDATE_TEST_KEY", "sk-validate-secret-123")
	out := filepath.Join(dir, "out")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	head := "source: {path: " + tasks + "}\noutput: {dir: " + out + "}\n"
	prompt := "prompt: {user: \"Solve: {question}\"}\n"
	endpoint := "generate:\n  endpoints: [\"" + refused.URL + "/v1\"]\n  model: m\n  api_key_env: VALIDATE_TEST_KEY\n"
	tests := []struct {
		name string
		body string
		want []string
	}{
		{"bad key", head + prompt + "generate: {modle: x}\n",
			[]string{"line 4: generate.modle: unknown key"}},
		{"unknown env", head + prompt + "env: {name: maths}\n",
			[]string{`line 4: env.name: unknown environment "maths"`}},
		{"bad template", head + "prompt: {user: \"Solve: {question\"}\n",
			[]string{"line 3: prompt.user: unterminated {"}},
		{"endpoint answers 401", head + prompt + endpoint,
			[]string{"line 5: generate.endpoints[0]: ", "the API key was refused (HTTP 401"}},
		{"subprocess command does not exist", head + prompt + "env: {name: subprocess, command: [" + filepath.Join(dir, "no-such-env") + "]}\n",
			[]string{"line 4: env.command: starting worker 0: ", "no-such-env"}},
		{"row missing a template field", head + prompt,
			[]string{"line 3: prompt.user: ", "t.jsonl:2: row has no field \"question\""}},
		{"every problem at once", head + prompt + endpoint + "groups: {keepp: all}\nenv: {name: subprocess, command: [" + filepath.Join(dir, "no-such-env") + "]}\n",
			[]string{"groups.keepp: unknown key", "the API key was refused", "env.command: starting worker 0", `row has no field "question"`, "4 problem(s)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := write(strings.ReplaceAll(tt.name, " ", "-")+".yaml", tt.body)
			code, stdout, stderr := validate(t, out, cfg)
			if code != cli.ExitUsage {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, cli.ExitUsage, stdout, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout+stderr, w) {
					t.Errorf("output lacks %q\nstdout:\n%s\nstderr:\n%s", w, stdout, stderr)
				}
			}
			if strings.Contains(stdout+stderr, "sk-validate-secret-123") {
				t.Errorf("the key leaked:\n%s\n%s", stdout, stderr)
			}
		})
	}
}

func TestValidateUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"validate"}, cli.ExitUsage, "Usage: trajflow validate"},
		{[]string{"validate", "--help"}, cli.ExitOK, "Usage: trajflow validate"},
		{[]string{"validate", "x.yaml", "--rows", "many"}, cli.ExitUsage, "--rows needs a whole number"},
		{[]string{"validate", "x.yaml", "--bogus"}, cli.ExitUsage, "unknown flag --bogus"},
		{[]string{"validate", filepath.Join(t.TempDir(), "absent.yaml")}, cli.ExitUsage, "absent.yaml"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		if code := cli.Main(tt.args, &stdout, &stderr); code != tt.code || !strings.Contains(stdout.String()+stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, want %d with %q\nstdout: %s\nstderr: %s", tt.args, code, tt.code, tt.want, &stdout, &stderr)
		}
	}
}

// --send sends each rendered row's first request: the server's answer is
// reported, and a request the server refuses is a problem (exit 2).
func TestValidateSend(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	t.Chdir(root)
	s := sim.New(sim.Options{Seed: 1, Model: "sim-math"})
	defer s.Close()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/completions") {
			http.Error(w, `{"error":{"message":"max_tokens is too large"}}`, http.StatusBadRequest)
			return
		}
		s.Handler().ServeHTTP(w, r)
	}))
	defer refusing.Close()
	tests := []struct {
		name       string
		sets       []string
		code       int
		want, errs string
	}{
		{"sim", nil, cli.ExitOK, "  sent: ", ""},
		{"refused", []string{"--set", "generate.endpoints=[" + refusing.URL + "/v1]", "--set", "generate.model=sim-math"}, cli.ExitUsage, "endpoints: 1 ok", "the first request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := append([]string{"examples/quickstart/config.yaml", "--set", "output.dir=" + out, "--rows", "1", "--send"}, tt.sets...)
			code, stdout, stderr := validate(t, out, args...)
			if code != tt.code || !strings.Contains(stdout, tt.want) || !strings.Contains(stderr, tt.errs) {
				t.Errorf("exit %d, want %d with %q on stdout and %q on stderr\nstdout:\n%s\nstderr:\n%s", code, tt.code, tt.want, tt.errs, stdout, stderr)
			}
		})
	}
}
