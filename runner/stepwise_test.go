package runner_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/internal/leak"
	"github.com/trajflow/trajflow/runner"
)

// exchange is one request the server received and what it answered.
type exchange struct {
	path     string
	seed     int64
	messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	promptIDs   []int32 // the prompt as the server tokenized it, or as sent (tokens mode)
	responseIDs []int32
	tokenize    bool // a POST /tokenize
}

// exchanges wraps the simulator's HTTP handler and records every request
// and answer.
type exchanges struct {
	h  http.Handler
	mu sync.Mutex
	ex []exchange
}

func (x *exchanges) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Seed     *int64          `json:"seed"`
		Messages json.RawMessage `json:"messages"`
		Prompt   json.RawMessage `json:"prompt"`
	}
	json.Unmarshal(body, &req)
	cw := &capture{ResponseWriter: w}
	x.h.ServeHTTP(cw, r)
	e := exchange{path: r.URL.Path, tokenize: strings.HasSuffix(r.URL.Path, "/tokenize")}
	if req.Seed != nil {
		e.seed = *req.Seed
	}
	json.Unmarshal(req.Messages, &e.messages)
	var resp struct {
		PromptTokenIDs []int32 `json:"prompt_token_ids"`
		Tokens         []int32 `json:"tokens"`
		Choices        []struct {
			TokenIDs       []int32 `json:"token_ids"`
			PromptTokenIDs []int32 `json:"prompt_token_ids"`
		} `json:"choices"`
	}
	json.Unmarshal(cw.buf.Bytes(), &resp)
	switch {
	case e.tokenize:
		e.promptIDs = resp.Tokens
	case len(resp.Choices) == 1:
		e.responseIDs = resp.Choices[0].TokenIDs
		e.promptIDs = resp.PromptTokenIDs
		if e.promptIDs == nil {
			e.promptIDs = resp.Choices[0].PromptTokenIDs
		}
		var ids []int32
		if json.Unmarshal(req.Prompt, &ids) == nil && ids != nil {
			e.promptIDs = ids
		}
	}
	x.mu.Lock()
	x.ex = append(x.ex, e)
	x.mu.Unlock()
}

// simServer serves a simulator over HTTP through a recorder.
func simServer(t *testing.T, seed int64) (*exchanges, *httptest.Server) {
	t.Helper()
	s := sim.New(sim.Options{Seed: seed, Preset: "short", Model: "sim"})
	t.Cleanup(func() { s.Close() })
	x := &exchanges{h: s.Handler()}
	srv := httptest.NewServer(x)
	t.Cleanup(srv.Close)
	return x, srv
}

// guessConfig is the guess example, step-wise, against url.
func guessConfig(t *testing.T, url string, sets ...string) *config.Config {
	t.Helper()
	root, _ := filepath.Abs("..")
	sets = append([]string{
		"source.path=" + filepath.Join(root, "examples/guess/tasks.jsonl"),
		"output.dir=" + t.TempDir(),
		"run.progress=0",
		"generate.endpoints=[" + url + "/v1]",
		"generate.params.logprobs=true", "generate.params.return_token_ids=true",
	}, sets...)
	cfg, err := config.Load(filepath.Join(root, "examples/guess/config.yaml"), sets)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var (
	nowRe  = regexp.MustCompile(`NOW (\d+):`)
	histRe = regexp.MustCompile(`<<step (\d+)>>`)
)

// TestHistoryWindow: with env.history_length 2 every request is built
// afresh: the system message and one user message holding the task, at
// most the last 2 steps (exactly min(steps so far, 2), the latest ones)
// and the current observation; in chat and in tokens mode (where the
// step's prompt is what /tokenize rendered).
func TestHistoryWindow(t *testing.T) {
	defer leak.Check(t)()
	for _, api := range []string{"chat", "tokens"} {
		t.Run(api, func(t *testing.T) {
			x, srv := simServer(t, 5)
			cfg := guessConfig(t, srv.URL, "generate.api="+api, "env.history_length=2", "source.limit=6",
				`env.step_template="{task}\n{history}NOW {step}: {observation}"`,
				`env.history_template="<<step {step}>> {observation} => {action}\n"`)
			sum, err := run(t, cfg, runner.Options{})
			if err != nil {
				t.Fatal(err)
			}
			srv.Close()
			if sum.OK == 0 {
				t.Fatalf("summary %+v", sum)
			}
			deep, checked := 0, 0
			for _, e := range x.ex {
				if api == "tokens" && !e.tokenize || api == "chat" && !strings.HasSuffix(e.path, "/chat/completions") {
					continue
				}
				if len(e.messages) == 0 || len(e.messages) == 1 && e.messages[0].Content == "Say OK." {
					continue // the start-up check's probe
				}
				if len(e.messages) != 2 || e.messages[0].Role != "system" || e.messages[1].Role != "user" {
					t.Fatalf("request messages %+v, want the system message and one user message", e.messages)
				}
				u := e.messages[1].Content
				if !strings.Contains(u, "Guess it.") {
					t.Fatalf("request lacks the task: %q", u)
				}
				m := nowRe.FindStringSubmatch(u)
				if m == nil {
					continue // not a step request
				}
				n, _ := strconv.Atoi(m[1])
				hist := histRe.FindAllStringSubmatch(u, -1)
				if len(hist) > 2 || len(hist) != min(n, 2) {
					t.Fatalf("step %d request holds %d earlier steps, want %d:\n%s", n, len(hist), min(n, 2), u)
				}
				for i, h := range hist {
					if h[1] != fmt.Sprint(n-len(hist)+i+1) {
						t.Fatalf("step %d request shows step %s, want the latest ones:\n%s", n, h[1], u)
					}
				}
				if n >= 3 {
					deep++
				}
				checked++
			}
			if checked == 0 || deep == 0 {
				t.Fatalf("%d step requests checked, %d past step 3: the window was not exercised", checked, deep)
			}
		})
	}
}
