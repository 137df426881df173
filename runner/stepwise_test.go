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
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/internal/leak"
	"github.com/trajflow/trajflow/readback"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
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
// and the current observation; in chat and in tokens and sglang mode
// (where the step's prompt is what /tokenize rendered), a whole run each.
func TestHistoryWindow(t *testing.T) {
	defer leak.Check(t)()
	for _, api := range []string{"chat", "tokens", "sglang"} {
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
			generated := 0
			for _, e := range x.ex {
				if e.path == "/generate" {
					generated++
				}
			}
			if (api == "sglang") != (generated > 0) {
				t.Fatalf("api %s: %d requests to /generate", api, generated)
			}
			deep, checked := 0, 0
			for _, e := range x.ex {
				if api != "chat" && !e.tokenize || api == "chat" && !strings.HasSuffix(e.path, "/chat/completions") {
					continue
				}
				if len(e.messages) == 0 || e.messages[0].Content == "Say OK." {
					continue // the start-up check's probes
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

// TestStepRows: output.steps writes one row per step of every kept
// trajectory (exactly sum(num_turns)), each step's ids are what the
// server received and answered for that request, episode_reward and
// episode_length are its trajectory's, and every data part file has its
// steps file holding exactly its trajectories' steps; step-wise (chat,
// tokens) and whole-chat alike.
func TestStepRows(t *testing.T) {
	defer leak.Check(t)()
	cases := []struct {
		name string
		sets []string
	}{
		{"stepwise chat", []string{"generate.api=chat", "env.history_length=2"}},
		{"stepwise tokens", []string{"generate.api=tokens", "env.history_length=0"}},
		{"whole chat", []string{"generate.api=chat"}},
		{"whole chat tokens", []string{"generate.api=tokens"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x, srv := simServer(t, 9)
			sets := append([]string{"output.steps=true", "source.limit=6", "output.batch_rows=4", "output.file_rows=8", "env.invalid_action_penalty=0.5"}, c.sets...)
			cfg := guessConfig(t, srv.URL, sets...)
			if _, err := run(t, cfg, runner.Options{}); err != nil {
				t.Fatal(err)
			}
			srv.Close()
			sent := map[string][]int32{} // seed and prompt ids -> response ids
			for _, e := range x.ex {
				if !e.tokenize && e.responseIDs != nil {
					sent[fmt.Sprint(e.seed, e.promptIDs)] = e.responseIDs
				}
			}
			stepwise := strings.Contains(c.name, "stepwise")
			var prompts map[string]string
			if stepwise {
				prompts = sentPrompts(x)
			}
			checkSteps(t, cfg.Output.Dir, sent, prompts, 0.5, 1)
			for _, r := range readBack(t, cfg.Output.Dir, schema.DataDir) {
				empty := len(r.PromptTokenIDs) == 0 && len(r.ResponseTokenIDs) == 0 && len(r.LossMask) == 0
				if empty != stepwise || r.CompletionTokens == 0 {
					t.Fatalf("%s: %d prompt ids, %d response ids, %d completion tokens (step-wise %v: the training view is empty exactly then)",
						r, len(r.PromptTokenIDs), len(r.ResponseTokenIDs), r.CompletionTokens, stepwise)
				}
			}
		})
	}
}

// sentPrompts are the chat requests' messages as raw_prompt writes them
// (JSON, role and content), by prompt ids (equal ids are the same
// rendering of the same messages); in tokens mode, the messages of the
// /tokenize request that rendered the prompt ids.
func sentPrompts(x *exchanges) map[string]string {
	out := map[string]string{}
	for _, e := range x.ex {
		if len(e.messages) == 0 || e.promptIDs == nil {
			continue
		}
		b, _ := json.Marshal(e.messages)
		out[fmt.Sprint(e.promptIDs)] = string(b)
	}
	return out
}

// checkSteps checks the pairing of the data and steps directories and
// every step row against its trajectory and, when sent is not nil, the
// server's exchanges. prompts, when not nil, are the requests' texts by
// prompt ids (sentPrompts): each step's raw_prompt must be its request's;
// nil, raw_prompt must be null (whole-chat requests). Step rewards are the
// environment's (the
// trajectory's turn_rewards); step_return is the discounted return of the
// step rewards (gamma) less the penalty of an invalid step, charged after
// the returns are computed, as verl-agent charges it.
func checkSteps(t *testing.T, dir string, sent map[string][]int32, prompts map[string]string, penalty, gamma float64) {
	t.Helper()
	dataFiles, _ := filepath.Glob(filepath.Join(dir, schema.DataDir, "part-*.parquet"))
	stepFiles, _ := filepath.Glob(filepath.Join(dir, schema.StepsDir, "part-*.parquet"))
	if len(dataFiles) < 2 || len(stepFiles) != len(dataFiles) {
		t.Fatalf("%d data files, %d steps files: want pairs (and more than one)", len(dataFiles), len(stepFiles))
	}
	total := 0
	for i, df := range dataFiles {
		if filepath.Base(df) != filepath.Base(stepFiles[i]) {
			t.Fatalf("data %s paired with steps %s", df, stepFiles[i])
		}
		trajs, err := readback.File(df)
		if err != nil {
			t.Fatal(err)
		}
		steps, err := readback.StepsFile(stepFiles[i])
		if err != nil {
			t.Fatal(err)
		}
		byTraj := map[string][]int{}
		for k, s := range steps {
			byTraj[s.TrajID] = append(byTraj[s.TrajID], k)
		}
		for _, r := range trajs {
			ks := byTraj[r.TrajID]
			if len(ks) != r.NumTurns {
				t.Fatalf("%s: %d step rows in %s, num_turns %d", r, len(ks), filepath.Base(df), r.NumTurns)
			}
			total += r.NumTurns
			next := 0.0
			for j := len(ks) - 1; j >= 0; j-- {
				s := steps[ks[j]]
				next = s.StepReward + gamma*next
				want := next
				if !s.IsActionValid {
					want -= penalty
				}
				if d := s.StepReturn - want; d > 1e-9 || d < -1e-9 {
					t.Fatalf("%s step %d: step_return %v, want %v", r, j+1, s.StepReturn, want)
				}
			}
			for j, k := range ks {
				s := steps[k]
				if int(s.Step) != j+1 || s.GroupID != r.GroupID || s.TaskIndex != r.Task.Index || int(s.RolloutIndex) != r.RolloutIndex || int(s.Attempt) != r.Attempt {
					t.Fatalf("%s: step row %+v does not match its trajectory", r, s)
				}
				if s.EpisodeReward != r.Reward || int(s.EpisodeLength) != r.NumTurns || s.StepReward != r.TurnRewards[j] {
					t.Fatalf("%s step %d: episode_reward %v length %d step_reward %v; trajectory %v %d %v", r, j+1, s.EpisodeReward, s.EpisodeLength, s.StepReward, r.Reward, r.NumTurns, r.TurnRewards)
				}

				if len(s.LossMask) != len(s.ResponseTokenIDs) || len(s.ResponseLogprobs) != len(s.ResponseTokenIDs) || len(s.ResponseTokenIDs) == 0 || len(s.PromptTokenIDs) == 0 {
					t.Fatalf("%s step %d: %d prompt ids, %d response ids, %d mask, %d logprobs", r, j+1, len(s.PromptTokenIDs), len(s.ResponseTokenIDs), len(s.LossMask), len(s.ResponseLogprobs))
				}
				switch key := fmt.Sprint(s.PromptTokenIDs); {
				case prompts == nil && s.RawPrompt != nil:
					t.Fatalf("%s step %d: raw_prompt %s with whole-chat requests", r, j+1, *s.RawPrompt)
				case prompts != nil && (s.RawPrompt == nil || *s.RawPrompt != prompts[key]):
					t.Fatalf("%s step %d: raw_prompt %v, the request was %s", r, j+1, s.RawPrompt, prompts[key])
				}
				if sent != nil {
					got, ok := sent[fmt.Sprint(r.Seed, s.PromptTokenIDs)]
					if !ok {
						t.Fatalf("%s step %d: the server received no request with this step's prompt ids", r, j+1)
					}
					if !slices.Equal(got, s.ResponseTokenIDs) {
						t.Fatalf("%s step %d: response ids %v, server sent %v", r, j+1, s.ResponseTokenIDs, got)
					}
				}
			}
			delete(byTraj, r.TrajID)
		}
		if len(byTraj) > 0 {
			t.Fatalf("%s: step rows of trajectories not in %s", stepFiles[i], df)
		}
	}
	if total == 0 {
		t.Fatal("no steps")
	}
}

// TestGridExample runs examples/grid (step-wise, history_length 2, step
// rows) against the simulator over HTTP: no request holds more than 2
// earlier steps, the simulator makes invalid moves that are penalised,
// steps of one group with identical anchor observations share an
// anchor_group_id (and only they), some anchor groups hold several steps,
// and each step's GiGPO statistics agree with its anchor group's returns.
func TestGridExample(t *testing.T) {
	defer leak.Check(t)()
	x, srv := simServer(t, 3)
	root, _ := filepath.Abs("..")
	cfg, err := config.Load(filepath.Join(root, "examples/grid/config.yaml"), []string{
		"source.path=" + filepath.Join(root, "examples/grid/tasks.jsonl"),
		"output.dir=" + t.TempDir(), "run.progress=0", "generate.endpoints=[" + srv.URL + "/v1]",
		"output.batch_rows=4", "output.file_rows=8",
	})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if sum.Steps != filepath.Join(cfg.Output.Dir, schema.StepsDir) || !strings.Contains(sum.String(), "step rows: "+sum.Steps) {
		t.Fatalf("summary names steps %q:\n%s", sum.Steps, sum)
	}
	sent := map[string][]int32{}
	for _, e := range x.ex {
		if len(e.messages) == 0 || e.tokenize {
			continue
		}
		sent[fmt.Sprint(e.seed, e.promptIDs)] = e.responseIDs
		if len(e.messages) != 1 {
			t.Fatalf("request messages %+v, want one user message", e.messages)
		}
		u := e.messages[0].Content
		if n := strings.Count(u, " action:\n"); n > 2 {
			t.Fatalf("a request holds %d earlier steps:\n%s", n, u)
		}
	}
	checkSteps(t, cfg.Output.Dir, sent, sentPrompts(x), 0.1, 0.95)
	steps, err := readback.Steps(filepath.Join(cfg.Output.Dir, schema.StepsDir))
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ group, anchor string }
	idOf := map[key]string{}
	anchorOf := map[string]string{}
	returns := map[string][]float64{}
	invalid, shared, lone := 0, 0, 0
	scores := map[string][]float64{} // group -> every step's episode score
	for _, s := range steps {
		score := s.EpisodeReward
		if !s.IsActionValid {
			score -= 0.1
		}
		scores[s.GroupID] = append(scores[s.GroupID], score)
		if s.AnchorObs == nil || s.AnchorGroupID == nil {
			t.Fatalf("step without an anchor: %+v", s)
		}
		if !strings.Contains(*s.AnchorObs, "A") || !strings.HasPrefix(*s.AnchorGroupID, s.GroupID+"/a") {
			t.Fatalf("anchor %q, id %q", *s.AnchorObs, *s.AnchorGroupID)
		}
		k := key{s.GroupID, *s.AnchorObs}
		if id, ok := idOf[k]; ok && id != *s.AnchorGroupID {
			t.Fatalf("equal anchors in group %s have ids %s and %s", s.GroupID, id, *s.AnchorGroupID)
		}
		idOf[k] = *s.AnchorGroupID
		if a, ok := anchorOf[*s.AnchorGroupID]; ok && a != *s.AnchorObs {
			t.Fatalf("anchor group %s holds two anchors", *s.AnchorGroupID)
		}
		anchorOf[*s.AnchorGroupID] = *s.AnchorObs
		returns[*s.AnchorGroupID] = append(returns[*s.AnchorGroupID], s.StepReturn)
		if !s.IsActionValid {
			invalid++
		}
		// The grid gives 1 at the goal and 0 otherwise: the rewards carry
		// no penalty (verl-agent charges it to the training scores only).
		if s.StepReward != 0 && s.StepReward != 1 || s.EpisodeReward != 0 && s.EpisodeReward != 1 {
			t.Fatalf("%s step %d: step_reward %v episode_reward %v, want the grid's 0 or 1", s.TrajID, s.Step, s.StepReward, s.EpisodeReward)
		}
	}
	for _, s := range steps {
		rs := returns[*s.AnchorGroupID]
		if int(s.AnchorGroupSize) != len(rs) {
			t.Fatalf("%s: anchor_group_size %d, %d steps", *s.AnchorGroupID, s.AnchorGroupSize, len(rs))
		}
		// GiGPO's step_norm_reward (mean_norm): the return less its anchor
		// group's mean return, which for a step alone is its own return.
		mean := 0.0
		for _, r := range rs {
			mean += r
		}
		mean /= float64(len(rs))
		if len(rs) > 1 {
			shared++
		} else {
			lone++
			if s.StepAdvantage != 0 {
				t.Fatalf("%s: alone in its anchor group, step_advantage %v (want 0)", *s.AnchorGroupID, s.StepAdvantage)
			}
		}
		if d := s.AnchorReturnMean - mean; d > 1e-9 || d < -1e-9 || s.StepAdvantage != s.StepReturn-s.AnchorReturnMean {
			t.Fatalf("%s: mean %v (want %v), advantage %v", *s.AnchorGroupID, s.AnchorReturnMean, mean, s.StepAdvantage)
		}
		// episode_norm_reward (mean_norm, across steps): the step's
		// episode score less the mean over every step of its group.
		ss := scores[s.GroupID]
		emean := 0.0
		for _, x := range ss {
			emean += x
		}
		emean /= float64(len(ss))
		score := s.EpisodeReward
		if !s.IsActionValid {
			score -= 0.1
		}
		if d := s.EpisodeAdvantage - (score - emean); d > 1e-9 || d < -1e-9 {
			t.Fatalf("%s step %d: episode_advantage %v, want %v", s.TrajID, s.Step, s.EpisodeAdvantage, score-emean)
		}
		if d := s.JointAdvantage - (s.EpisodeAdvantage + s.StepAdvantage); d > 1e-12 || d < -1e-12 {
			t.Fatalf("%s step %d: joint_advantage %v, episode %v + step %v", s.TrajID, s.Step, s.JointAdvantage, s.EpisodeAdvantage, s.StepAdvantage)
		}
	}
	if invalid == 0 || shared == 0 || lone == 0 {
		t.Fatalf("%d invalid steps, %d steps in shared anchor groups, %d alone: the example does not exercise them all", invalid, shared, lone)
	}
	t.Logf("%d steps, %d invalid, %d in shared anchor groups, %d alone", len(steps), invalid, shared, lone)
}
