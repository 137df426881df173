package ollama

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is the trajflow binary TestMain built.
var binary string

// shared is the engine most tests use, started by the first of them and
// stopped by TestMain; its models are created once.
var shared struct {
	once sync.Once
	e    *engine
	err  error
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "trajflow-ollama-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "ollama e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, "ollama e2e:", err)
		return 1
	}
	gobin, err := exec.LookPath("go")
	if r := os.Getenv("GOROOT"); r != "" {
		if _, serr := os.Stat(filepath.Join(r, "bin", "go")); serr == nil {
			gobin, err = filepath.Join(r, "bin", "go"), nil
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ollama e2e: no go command to build trajflow:", err)
		return 1
	}
	binary = filepath.Join(dir, "trajflow")
	build := exec.Command(gobin, "build", "-o", binary, "./cmd/trajflow")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "ollama e2e: go build ./cmd/trajflow: %v\n%s", err, out)
		return 1
	}
	code := m.Run()
	if shared.e != nil {
		shared.e.kill()
		_ = os.RemoveAll(shared.e.root) // best effort: a temporary directory
	}
	return code
}

// paths finds the ollama binary and the model directories .ci/run
// prepares: $TRAJFLOW_OLLAMA and $TRAJFLOW_OLLAMA_MODELS, else
// ~/.cache/trajflow-ollama/ollama and ~/.cache/trajflow-ollama/models.
// Without them the test skips, unless CI=true, where it fails.
func paths(t *testing.T) (bin, models string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real inference engine (Ollama); skipped under -short")
	}
	bin, models = os.Getenv("TRAJFLOW_OLLAMA"), os.Getenv("TRAJFLOW_OLLAMA_MODELS")
	if home, err := os.UserHomeDir(); err == nil {
		if bin == "" {
			bin = filepath.Join(home, ".cache", "trajflow-ollama", "ollama")
		}
		if models == "" {
			models = filepath.Join(home, ".cache", "trajflow-ollama", "models")
		}
	}
	var missing []string
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		missing = append(missing, "the ollama binary ("+bin+")")
	}
	for _, m := range []string{"tiny", "tiny-tools"} {
		if _, err := os.Stat(filepath.Join(models, m, "model.safetensors")); err != nil {
			missing = append(missing, "the model directory "+filepath.Join(models, m))
		}
	}
	if len(missing) == 0 {
		return bin, models
	}
	msg := "missing " + strings.Join(missing, " and ") + ": `bash .ci/run` builds Ollama and writes the tiny models " +
		"(TRAJFLOW_OLLAMA, TRAJFLOW_OLLAMA_MODELS; docs/testing.md has the commands)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return "", ""
}

// engine is an `ollama serve` process group.
type engine struct {
	bin, root, store, addr string
	cmd                    *exec.Cmd
	mu                     sync.Mutex
	logs                   bytes.Buffer
	done                   chan struct{}
}

func (e *engine) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.logs.Write(p)
}

func (e *engine) log() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.logs.String()
	if len(s) > 8000 {
		s = "…" + s[len(s)-8000:]
	}
	return s
}

// base is the engine's OpenAI-compatible base URL.
func (e *engine) base() string { return "http://" + e.addr + "/v1" }

// startEngine starts `ollama serve` on addr ("" for a free loopback
// port) with its models in store, in its own process group (the runner
// processes it starts included), and waits until it answers.
func startEngine(bin, root, store, addr string) (*engine, error) {
	if addr == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addr = l.Addr().String()
		_ = l.Close() // best effort: the port is only reserved to be named
	}
	e := &engine{bin: bin, root: root, store: store, addr: addr, done: make(chan struct{})}
	e.cmd = exec.Command(bin, "serve")
	e.cmd.Env = e.env()
	e.cmd.Stdout, e.cmd.Stderr = e, e
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = e.cmd.Wait(); close(e.done) }()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + addr + "/api/version")
		if err == nil {
			_ = resp.Body.Close() // best effort: a probe
			if resp.StatusCode == 200 {
				return e, nil
			}
		}
		select {
		case <-e.done:
			return nil, fmt.Errorf("ollama serve exited (%v) before answering:\n%s", e.cmd.ProcessState, e.log())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.kill()
			return nil, fmt.Errorf("ollama serve did not answer within a minute:\n%s", e.log())
		}
	}
}

// env is the environment of the engine and of its client commands.
func (e *engine) env() []string {
	return append(os.Environ(),
		"HOME="+e.root, // ollama keeps its key in ~/.ollama
		"OLLAMA_HOST="+e.addr,
		"OLLAMA_MODELS="+e.store,
		"OLLAMA_NUM_PARALLEL=4",
		"OLLAMA_KEEP_ALIVE=1h",
		"OLLAMA_CONTEXT_LENGTH=4096",
		"OLLAMA_NOPRUNE=1",
	)
}

// kill ends the engine's process group with SIGKILL and waits for the
// server to exit.
func (e *engine) kill() {
	_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL) // best effort: it may be gone
	<-e.done
}

// create runs `ollama create NAME -f Modelfile` for a model directory
// tinyqwen wrote: the Qwen3 renderer and parser over the converted
// Qwen2 weights, generating on one thread.
func (e *engine) create(name, dir string) error {
	mf := filepath.Join(e.root, name+".Modelfile")
	// One thread: ggml's threads spin while they wait for each other, and
	// on a busy 2-core machine two of them made a token 15 times slower.
	text := fmt.Sprintf("FROM %s\nRENDERER qwen3-vl-instruct\nPARSER qwen3-vl-instruct\nPARAMETER num_thread 1\n", dir)
	if err := os.WriteFile(mf, []byte(text), 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, "create", name, "-f", mf)
	cmd.Env = e.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ollama create %s: %v\n%s\nserver log:\n%s", name, err, out, e.log())
	}
	return nil
}

// derive runs `ollama create NAME` with a Modelfile of the lines given
// after "FROM base": a model of base's weights with other parameters.
func (e *engine) derive(name, base string, lines ...string) error {
	mf := filepath.Join(e.root, name+".Modelfile")
	text := "FROM " + base + "\n" + strings.Join(lines, "\n") + "\n"
	if err := os.WriteFile(mf, []byte(text), 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, "create", name, "-f", mf)
	cmd.Env = e.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ollama create %s (FROM %s): %v\n%s\nserver log:\n%s", name, base, err, out, e.log())
	}
	return nil
}

// sharedEngine is the engine most tests use, with the models tiny and
// tiny-tools created.
func sharedEngine(t *testing.T) *engine {
	t.Helper()
	bin, models := paths(t)
	shared.once.Do(func() {
		root, err := os.MkdirTemp("", "trajflow-ollama-")
		if err != nil {
			shared.err = err
			return
		}
		start := time.Now()
		e, err := startEngine(bin, root, filepath.Join(root, "models"), "")
		if err != nil {
			shared.err = err
			return
		}
		shared.e = e
		for _, m := range []string{"tiny", "tiny-tools"} {
			if err := e.create(m, filepath.Join(models, m)); err != nil {
				shared.err = err
				return
			}
		}
		t.Logf("ollama serve on %s, models created in %s", e.addr, time.Since(start).Round(time.Millisecond))
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.e
}

// exchange is one chat completion that went through the proxy.
type exchange struct {
	Request struct {
		Model    string            `json:"model"`
		Messages []json.RawMessage `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
	}
	Status   int
	Response struct {
		Choices []struct {
			Message struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	RawResponse string
}

// recorder is a reverse proxy to an engine that keeps every chat
// completion it passes on; newRecorder takes the engine's root URL and
// the recorder's url is the base URL (…/v1) to give trajflow.
type recorder struct {
	url string
	mu  sync.Mutex
	log []exchange
}

func newRecorder(t *testing.T, target string) *recorder {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/chat/completions") {
			proxy.ServeHTTP(w, req)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, req)
		var x exchange
		_ = json.Unmarshal(body, &x.Request) // best effort: trajflow's own request
		x.Status = rec.Code
		x.RawResponse = rec.Body.String()
		_ = json.Unmarshal(rec.Body.Bytes(), &x.Response) // an error body leaves it empty
		r.mu.Lock()
		r.log = append(r.log, x)
		r.mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes()) // best effort: the client may be gone
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/v1"
	return r
}

func (r *recorder) exchanges() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.log...)
}

// result is a finished trajflow process.
type result struct {
	code           int
	stdout, stderr string
}

// trajflow runs the binary to completion.
func trajflow(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("trajflow %s: %v", strings.Join(args, " "), err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}
