package gymcontract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// SimpleAgent is NeMo Gym's simple agent (responses_api_agents/simple_agent/app.py
// at the Gym revision of testdata/models.json,
// 07d6b0d07b22fcf530b4c211dae2ee23100428e4), transcribed for tests. On
// POST /run it posts the row to its resources server's /seed_session,
// then calls its model server's POST /v1/responses in a loop with the
// row's responses_create_params and the input grown by each answer's
// output items (token fields included, as Gym sends them back) and the
// function_call_output of each function call, run against the resources
// server (POST /{name} with the parsed arguments, the session cookies
// kept); the first model call carries no cookie, later ones the model
// server's. The loop ends on an answer with incomplete_details, on one
// with an assistant message and no function call, or after MaxSteps
// model calls. Then it posts the row with "response" (the last answer,
// its output the whole of the episode's outputs, its usage summed) to
// /verify and answers with the verify answer. POST /aggregate_metrics is
// passed on to the resources server. A model answer that is not 2xx or
// does not validate as NeMoGymResponse fails the /run (500), as Gym's
// raise_for_status and model_validate do.
type SimpleAgent struct {
	// Resources and Model are the base URLs of the resources server and
	// of the model server (its /v1/responses is called).
	Resources, Model string
	// MaxSteps bounds the model calls of an episode (0: none).
	MaxSteps int
	// Models validates the model server's answers.
	Models *Models
	// Client makes the agent's calls (nil: a client of its own).
	Client *http.Client

	mu     sync.Mutex
	calls  int
	bad    []error
	tokens map[string][]TokenCall
}

// TokenCall is what a model answer's token fields said: the last output
// item's prompt_token_ids and generation_token_ids (nil when it had none).
type TokenCall struct {
	Prompt, Generated []int64
}

// TokenCalls are the token fields of the model answers of the last
// episode of the row with these _ng_task_index and _ng_rollout_index, in
// order.
func (a *SimpleAgent) TokenCalls(task, rollout int64) []TokenCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tokens[fmt.Sprint(task, "/", rollout)]
}

// Calls is how many model calls the agent made.
func (a *SimpleAgent) Calls() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls
}

// Errors are the failures of /run so far.
func (a *SimpleAgent) Errors() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.bad...)
}

func (a *SimpleAgent) client() *http.Client {
	if a.Client != nil {
		return a.Client
	}
	return &http.Client{Timeout: 5 * time.Minute}
}

func (a *SimpleAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch r.URL.Path {
	case "/run":
		out, err := a.run(body)
		if err != nil {
			a.mu.Lock()
			a.bad = append(a.bad, err)
			a.mu.Unlock()
			w.WriteHeader(http.StatusInternalServerError)
			_ = json.NewEncoder(w).Encode(map[string]any{"detail": err.Error()})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	case "/aggregate_metrics":
		res, err := a.post(a.Resources+"/aggregate_metrics", body, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.WriteHeader(res.status)
		_, _ = w.Write(res.body)
	default:
		http.NotFound(w, r)
	}
}

type answer struct {
	status  int
	body    []byte
	cookies []*http.Cookie
}

func (a *SimpleAgent) post(url string, body []byte, cookies map[string]string) (*answer, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range cookies {
		req.AddCookie(&http.Cookie{Name: k, Value: v})
	}
	res, err := a.client().Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = res.Body.Close() }() // best effort: a response body, read
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	return &answer{status: res.StatusCode, body: b, cookies: res.Cookies()}, nil
}

// raiseForStatus is Gym's raise_for_status.
func raiseForStatus(what string, res *answer) error {
	if res.status/100 != 2 {
		return fmt.Errorf("%s: HTTP %d: %s", what, res.status, res.body)
	}
	return nil
}

func cookieMap(cs []*http.Cookie) map[string]string {
	m := map[string]string{}
	for _, c := range cs {
		m[c.Name] = c.Value
	}
	return m
}

func (a *SimpleAgent) run(body []byte) ([]byte, error) {
	if a.Models != nil {
		if err := a.Models.Validate("BaseRunRequest", body); err != nil {
			return nil, fmt.Errorf("422: %w", err)
		}
	}
	var row map[string]any
	if err := json.Unmarshal(body, &row); err != nil {
		return nil, err
	}
	seed, err := a.post(a.Resources+"/seed_session", body, nil)
	if err != nil {
		return nil, err
	}
	if err := raiseForStatus("/seed_session", seed); err != nil {
		return nil, err
	}
	cookies := cookieMap(seed.cookies)
	rcp, _ := row["responses_create_params"].(map[string]any)
	key := fmt.Sprint(row["_ng_task_index"], "/", row["_ng_rollout_index"])
	a.mu.Lock()
	if a.tokens == nil {
		a.tokens = map[string][]TokenCall{}
	}
	a.tokens[key] = nil
	a.mu.Unlock()
	resp, cookies, err := a.episode(key, rcp, cookies)
	if err != nil {
		return nil, err
	}
	verify := maps.Clone(row)
	verify["response"] = resp
	vb, _ := json.Marshal(verify)
	res, err := a.post(a.Resources+"/verify", vb, cookies)
	if err != nil {
		return nil, err
	}
	if err := raiseForStatus("/verify", res); err != nil {
		return nil, err
	}
	return res.body, nil
}

// episode is _create_episode: the model calls and tool calls of one
// rollout; it returns the last model answer with the episode's outputs
// and summed usage, and the cookies to verify with.
func (a *SimpleAgent) episode(key string, rcp map[string]any, resCookies map[string]string) (map[string]any, map[string]string, error) {
	body := maps.Clone(rcp)
	var input []any
	switch in := body["input"].(type) {
	case string:
		input = []any{map[string]any{"content": in, "role": "user", "type": "message"}}
	case []any:
		input = in
	}
	var outputs []any
	var usage map[string]any
	var modelCookies map[string]string
	var last map[string]any
	for step := 1; ; step++ {
		nb := maps.Clone(body)
		nb["input"] = append(append([]any(nil), input...), outputs...)
		b, _ := json.Marshal(nb)
		a.mu.Lock()
		a.calls++
		a.mu.Unlock()
		res, err := a.post(a.Model+"/v1/responses", b, modelCookies)
		if err != nil {
			return nil, nil, err
		}
		if err := raiseForStatus("model server /v1/responses", res); err != nil {
			return nil, nil, err
		}
		modelCookies = cookieMap(res.cookies)
		if a.Models != nil {
			if err := a.Models.Validate("NeMoGymResponse", res.body); err != nil {
				return nil, nil, fmt.Errorf("received an invalid response from model server: %w", err)
			}
		}
		if err := json.Unmarshal(res.body, &last); err != nil {
			return nil, nil, err
		}
		output, _ := last["output"].([]any)
		outputs = append(outputs, output...)
		var tc TokenCall
		if n := len(output); n > 0 {
			it, _ := output[n-1].(map[string]any)
			tc.Prompt, tc.Generated = int64s(it["prompt_token_ids"]), int64s(it["generation_token_ids"])
		}
		a.mu.Lock()
		a.tokens[key] = append(a.tokens[key], tc)
		a.mu.Unlock()
		usage = addUsage(usage, last["usage"])
		last["usage"] = nil
		if d, _ := last["incomplete_details"].(map[string]any); d != nil {
			break
		}
		var calls []map[string]any
		messages := 0
		for _, o := range output {
			it, _ := o.(map[string]any)
			switch {
			case it["type"] == "function_call":
				calls = append(calls, it)
			case it["type"] == "message" && it["role"] == "assistant":
				messages++
			}
		}
		if len(calls) == 0 && messages > 0 {
			break
		}
		for _, c := range calls {
			args, _ := c["arguments"].(string)
			var out string
			var parsed any
			if err := json.Unmarshal([]byte(args), &parsed); err != nil {
				eb, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("Invalid tool call arguments: JSONDecodeError(%q)", err.Error())})
				out = string(eb)
			} else {
				tr, err := a.post(a.Resources+"/"+fmt.Sprint(c["name"]), []byte(args), resCookies)
				if err != nil {
					return nil, nil, err
				}
				out = string(tr.body)
				maps.Copy(resCookies, cookieMap(tr.cookies))
			}
			outputs = append(outputs, map[string]any{"type": "function_call_output", "call_id": c["call_id"], "output": out})
		}
		if a.MaxSteps > 0 && step >= a.MaxSteps {
			break
		}
	}
	last["output"] = outputs
	last["usage"] = usage
	cookies := maps.Clone(resCookies)
	maps.Copy(cookies, modelCookies)
	return last, cookies, nil
}

func int64s(v any) []int64 {
	l, ok := v.([]any)
	if !ok {
		return nil
	}
	out := make([]int64, len(l))
	for i, x := range l {
		f, _ := x.(float64)
		out[i] = int64(f)
	}
	return out
}

// addUsage is accumulate_response_usage.
func addUsage(total map[string]any, add any) map[string]any {
	u, _ := add.(map[string]any)
	if u == nil {
		return total
	}
	if total == nil {
		b, _ := json.Marshal(u)
		_ = json.Unmarshal(b, &total)
		return total
	}
	for _, k := range []string{"input_tokens", "output_tokens", "total_tokens"} {
		x, _ := total[k].(float64)
		y, _ := u[k].(float64)
		total[k] = x + y
	}
	return total
}

// ArithmeticResources is a NeMo Gym resources server for tests: POST
// /seed_session sets a session cookie; the tool POST /add ({"amount": N})
// adds to the session's balance and answers {"balance": B}; POST /verify
// rewards 1 when the response's last output item is an assistant message
// whose text holds \boxed{expected_answer}, else 0, and adds the
// session's tool calls (tool_calls) and whether the answer was boxed
// (boxed) to the row; POST /aggregate_metrics answers Gym's shape with
// the count of rows and their mean reward. Every body is validated with
// Gym's models (Gate's rules); a refused one is answered 422.
type ArithmeticResources struct {
	mu    sync.Mutex
	next  int
	calls map[string]int
	// Refused are the bodies refused.
	Refused *Rejections
	h       http.Handler
}

// NewArithmeticResources returns the server, validating with m.
func NewArithmeticResources(m *Models) *ArithmeticResources {
	s := &ArithmeticResources{calls: map[string]int{}}
	s.h, s.Refused = m.Gate(http.HandlerFunc(s.serve))
	return s
}

func (s *ArithmeticResources) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.h.ServeHTTP(w, r) }

var boxed = regexp.MustCompile(`\\boxed\{([^}]*)\}`)

func (s *ArithmeticResources) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	sess := ""
	if c, err := r.Cookie("session_id"); err == nil {
		sess = c.Value
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/seed_session":
		s.mu.Lock()
		s.next++
		id := fmt.Sprint("s", s.next)
		s.mu.Unlock()
		http.SetCookie(w, &http.Cookie{Name: "session_id", Value: id})
		fmt.Fprint(w, `{}`)
	case "/add":
		s.mu.Lock()
		s.calls[sess]++
		n := s.calls[sess]
		s.mu.Unlock()
		fmt.Fprintf(w, `{"balance": %d}`, n)
	case "/verify":
		reward, isBoxed := 0.0, false
		resp, _ := body["response"].(map[string]any)
		out, _ := resp["output"].([]any)
		if len(out) > 0 {
			if last, _ := out[len(out)-1].(map[string]any); last["type"] == "message" {
				var text strings.Builder
				content, _ := last["content"].([]any)
				for _, c := range content {
					if p, _ := c.(map[string]any); p != nil {
						text.WriteString(fmt.Sprint(p["text"]))
					}
				}
				if m := boxed.FindAllStringSubmatch(text.String(), -1); len(m) > 0 {
					isBoxed = true
					if m[len(m)-1][1] == fmt.Sprint(body["expected_answer"]) {
						reward = 1
					}
				}
			}
		}
		s.mu.Lock()
		calls := s.calls[sess]
		s.mu.Unlock()
		answer := maps.Clone(body)
		answer["reward"] = reward
		answer["boxed"] = isBoxed
		answer["tool_calls"] = calls
		_ = json.NewEncoder(w).Encode(answer)
	case "/aggregate_metrics":
		rows, _ := body["verify_responses"].([]any)
		sum := 0.0
		for _, r := range rows {
			if m, _ := r.(map[string]any); m != nil {
				f, _ := m["reward"].(float64)
				sum += f
			}
		}
		mean := 0.0
		if len(rows) > 0 {
			mean = sum / float64(len(rows))
		}
		fmt.Fprintf(w, `{"agent_metrics": {"n": %d, "mean/reward": %g}, "key_metrics": {"mean/reward": %g}, "group_level_metrics": []}`, len(rows), mean, mean)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"detail": "Not Found"}`)
	}
}
