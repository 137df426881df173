package generate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/generate"
)

// The Qwen3 tests run tokens mode against a vLLM-shaped server whose
// /tokenize answers are Qwen3's real chat template and tokenizer, recorded
// in testdata/qwen3/fixture.json (see testdata/qwen3/README.md), and whose
// model replies are scripted texts tokenized by the same tokenizer.
//
// To regenerate the fixture after changing a test or the requests trajflow
// sends: go test ./stages/generate/ -run Qwen3 -args
// -qwen3.record=$PWD/testdata/qwen3/requests.json (the server then answers
// with the simulator's template), then run testdata/qwen3/make_fixture.py.
var qwen3Record = flag.String("qwen3.record", "", "record the Qwen3 tests' requests to this file instead of reading the fixture")

const qwen3Fixture = "../../testdata/qwen3/fixture.json"

// Qwen3's token ids.
const (
	q3ImStart   int32 = 151644
	q3ImEnd     int32 = 151645
	q3Think     int32 = 151667
	q3ThinkEnd  int32 = 151668
	q3NL        int32 = 198   // "\n"
	q3NLNL      int32 = 271   // "\n\n"
	q3Assistant int32 = 77091 // "assistant"
)

type fixture struct {
	Tokenizer string `json:"tokenizer"`
	Tokenize  []struct {
		Request json.RawMessage `json:"request"`
		Text    string          `json:"text"`
		IDs     []int32         `json:"ids"`
	} `json:"tokenize"`
	Texts []struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	} `json:"texts"`
}

// recording is what record mode collects: the inputs of
// make_fixture.py.
type recording struct {
	mu         sync.Mutex
	Tokenize   []json.RawMessage `json:"tokenize"`
	Texts      []string          `json:"texts"`
	Hermes     []string          `json:"hermes"`
	PythonJSON []string          `json:"python_json"`
	seen       map[string]bool
}

var recorded = &recording{seen: map[string]bool{}}

func (r *recording) add(kind, s string, raw json.RawMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[kind+"\x00"+s] {
		return
	}
	r.seen[kind+"\x00"+s] = true
	switch kind {
	case "tokenize":
		r.Tokenize = append(r.Tokenize, raw)
	case "text":
		r.Texts = append(r.Texts, s)
	case "hermes":
		r.Hermes = append(r.Hermes, s)
	case "json":
		r.PythonJSON = append(r.PythonJSON, s)
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if *qwen3Record != "" && code == 0 {
		// The JSON texts whose Python re-serialisation inference's tests
		// hold PythonJSON to, and the tool-call texts of its hermes tests.
		for _, s := range []string{`{"expression":"85 + 15"}`, `{"a":1,"b":[1,2,{"c":null}],"d":true,"e":false}`, `{}`, `[]`, `{"x":{}}`,
			`"just a string"`, `null`, `3`, `-0`, `-0.0`, `1.0`, `1.50`, `1e2`, `1E-7`, `0.0001`, `0.00001`, `1e16`, `1e15`,
			`123456789012345678`, `123456789012345678.0`, `3.141592653589793238`, `1e400`, `-1e400`, `2.5e-300`, `5e-324`, `1.7976931348623157e308`,
			`{"city":"Zürich","emoji":"😀","cjk":"北京"}`, `{"esc":"a\"b\\c\nd\te\r\b\f\u0001\u001f\u007f"}`,
			`{"html":"<a href='x'>&</a>","ls":"\u2028\u2029"}`, `{"dup":1,"other":2,"dup":3}`, `{"nested":{"z":1,"a":2}}`,
			"  {\"spaced\" :  [ 1 ,2 ] }  ", `{"big":12345678901234567890123,"neg":-5,"f":-2.50}`, `{"u":"\u00e9\ud83d\ude00"}`} {
			recorded.add("json", s, nil)
		}
		for _, s := range []string{
			"<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\":\"85+15\",\"precision\":2.50}}\n</tool_call>",
			"Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"y\\\":2}\"}\n</tool_call>",
			"<tool_call>\n{\"name\": \"a\", \"arguments\": null}\n</tool_call>",
			"<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": \"Zürich \\u00e9\\n\"}}",
			"<tool_call>\n{\"name\": \"a\"}\n</tool_call>",
			"<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}} trailing\n</tool_call>",
			"no call here",
		} {
			recorded.add("hermes", s, nil)
		}
		b, err := json.MarshalIndent(recorded, "", " ")
		if err == nil {
			err = os.WriteFile(*qwen3Record, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// canonical is a JSON value's text with object keys sorted.
func canonical(t testing.TB, raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("canonical: %v", err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// reply is a scripted model output: its text, how it ended, and whether
// the model generated the end-of-turn token.
type reply struct {
	text   string
	finish string
	eot    bool
}

// qwen3Server is a vLLM-shaped server: /tokenize from the fixture (or, in
// record mode, the simulator's template, the request recorded) and
// /v1/completions from a script.
type qwen3Server struct {
	t       *testing.T
	renders map[string][]int32
	texts   map[string][]int32
	sim     http.Handler
	mu      sync.Mutex
	script  []reply
}

func loadQwen3(t *testing.T) (map[string][]int32, map[string][]int32) {
	t.Helper()
	if *qwen3Record != "" {
		return nil, nil
	}
	data, err := os.ReadFile(qwen3Fixture)
	if err != nil {
		t.Fatalf("the Qwen3 fixture: %v (see testdata/qwen3/README.md)", err)
	}
	var f fixture
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	renders := map[string][]int32{}
	for _, e := range f.Tokenize {
		renders[canonical(t, e.Request)] = e.IDs
	}
	texts := map[string][]int32{}
	for _, e := range f.Texts {
		texts[e.Text] = e.IDs
	}
	return renders, texts
}

func (s *qwen3Server) ids(text string) []int32 {
	if *qwen3Record != "" {
		recorded.add("text", text, nil)
		return sim.Tokenize(text)
	}
	ids, ok := s.texts[text]
	if !ok {
		s.t.Errorf("reply %q is not in the Qwen3 fixture: regenerate it (testdata/qwen3/README.md)", text)
	}
	return ids
}

func (s *qwen3Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	switch r.URL.Path {
	case "/tokenize":
		if *qwen3Record != "" {
			recorded.add("tokenize", canonical(s.t, body), json.RawMessage(canonical(s.t, body)))
			r.Body = io.NopCloser(bytes.NewReader(body))
			s.sim.ServeHTTP(w, r)
			return
		}
		ids, ok := s.renders[canonical(s.t, body)]
		if !ok {
			s.t.Errorf("POST /tokenize %s is not in the Qwen3 fixture: regenerate it (testdata/qwen3/README.md)", body)
			http.Error(w, "not in the fixture", http.StatusInternalServerError)
			return
		}
		writeJSONBody(w, map[string]any{"count": len(ids), "tokens": ids})
	case "/v1/completions":
		var req struct {
			Prompt []int32 `json:"prompt"`
		}
		if err := json.Unmarshal(body, &req); err != nil || len(req.Prompt) == 0 {
			http.Error(w, "want a token-id prompt", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		if len(s.script) == 0 {
			s.mu.Unlock()
			http.Error(w, "no reply scripted", http.StatusInternalServerError)
			return
		}
		rep := s.script[0]
		s.script = s.script[1:]
		s.mu.Unlock()
		ids := slices.Clone(s.ids(rep.text))
		if rep.eot {
			ids = append(ids, q3ImEnd)
			if *qwen3Record != "" {
				ids[len(ids)-1] = sim.TokEnd
			}
		}
		lp := make([]float32, len(ids))
		for i := range lp {
			lp[i] = -0.25
		}
		writeJSONBody(w, map[string]any{
			"object": "text_completion",
			"choices": []any{map[string]any{"index": 0, "text": rep.text, "token_ids": ids, "prompt_token_ids": req.Prompt,
				"finish_reason": rep.finish, "logprobs": map[string]any{"token_logprobs": lp}}},
			"usage": map[string]int{"prompt_tokens": len(req.Prompt), "completion_tokens": len(ids)},
		})
	default:
		http.NotFound(w, r)
	}
}

func writeJSONBody(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// q3turn is one turn of a case: the model's reply and the observation
// the environment answers it with (the last turn's ends the trajectory).
type q3turn struct {
	reply reply
	obs   []pipeline.Message
	// whole: the template renders the reply, re-rendered in the whole
	// conversation, as the model generated it (no reasoning to drop), so
	// the row from the reply's start on is the template's rendering.
	whole bool
}

type q3case struct {
	name   string
	kwargs map[string]any
	tools  []json.RawMessage
	user   string
	turns  []q3turn
	// check runs on the finished rollout.
	check func(t *testing.T, r *pipeline.Rollout)
}

var calculator = json.RawMessage(`{"type":"function","function":{"name":"calculator","description":"Evaluates an arithmetic expression.","parameters":{"type":"object","properties":{"expression":{"type":"string","description":"The expression."}},"required":["expression"]}}}`)

func qwen3Cases() []q3case {
	noThink := map[string]any{"enable_thinking": false}
	user := func(s string) []pipeline.Message { return []pipeline.Message{{Role: pipeline.RoleUser, Content: s}} }
	return []q3case{
		{
			name: "thinking off: finished and cut replies", kwargs: noThink, user: "What is 85 + 15?",
			turns: []q3turn{
				{reply: reply{"The answer is 100.", "stop", true}, obs: user("Correct. Now, what is 7 * 6? Explain your steps."), whole: true},
				{reply: reply{"First, 7 * 6 means adding 7 six times: 7 + 7", "length", false}, obs: user("Your reply was cut. Just the number, please."), whole: true},
				{reply: reply{"42", "stop", true}, obs: user("Correct!"), whole: true},
			},
		},
		{
			name: "thinking on: a cut reply ending in a newline, then a stop string", user: "What is 85 + 15?",
			turns: []q3turn{
				{reply: reply{"<think>\nLet me add the numbers step by step\n", "length", false}, obs: user("You ran out of room. Answer briefly."), whole: true},
				{reply: reply{"<think>\nShort answer.\n</think>\n\nThe answer is 100", "stop", false}, obs: user("Correct.")},
			},
			check: func(t *testing.T, r *pipeline.Rollout) {
				// The first reply's last token is "\n", the closing's
				// second token: the turn is still closed.
				a := r.Messages[1]
				if got := r.Tokens()[a.TokenEnd-1]; got != q3NL {
					t.Fatalf("the cut reply ends with %d, want the newline %d for this case", got, q3NL)
				}
			},
		},
		{
			name: "tool call, thinking off", kwargs: noThink, tools: []json.RawMessage{calculator}, user: "What is 85 + 15? Use the calculator.",
			turns: []q3turn{
				{reply: reply{"<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"85 + 15\"}}\n</tool_call>", "stop", true},
					obs: []pipeline.Message{{Role: pipeline.RoleTool, ToolCallID: "call_1_0", Content: "100"}}, whole: true},
				{reply: reply{"85 + 15 = 100.", "stop", true}, obs: user("Correct."), whole: true},
			},
			check: func(t *testing.T, r *pipeline.Rollout) {
				c := r.Messages[1].ToolCalls
				if len(c) != 1 || c[0].Name != "calculator" || c[0].Arguments != `{"expression": "85 + 15"}` {
					t.Fatalf("tool calls %+v", c)
				}
			},
		},
	}
}

// TestQwen3 holds tokens mode to Qwen3's real template and tokenizer:
// the first prompt (with enable_thinking: false, the empty think block),
// and after every reply, finished or not, the row from the end of the
// reply's text on is exactly the template's rendering of the whole
// conversation: the turn closed with "<|im_end|>\n" (mask 0 where the
// model did not generate it), the observation, the generation prompt.
func TestQwen3(t *testing.T) {
	renders, texts := loadQwen3(t)
	for _, tc := range qwen3Cases() {
		t.Run(tc.name, func(t *testing.T) {
			s := &qwen3Server{t: t, renders: renders, texts: texts, sim: sim.New(sim.Options{Seed: 1}).Handler()}
			for _, tu := range tc.turns {
				s.script = append(s.script, tu.reply)
			}
			srv := httptest.NewServer(s)
			defer srv.Close()
			c, err := openai.NewHTTP(inference.Config{Endpoints: []string{srv.URL + "/v1"}, Model: "Qwen/Qwen3-8B", API: "tokens", Concurrency: 1, MaxAttempts: 1}, openai.HTTPOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			params := map[string]any{"max_tokens": 64}
			if tc.kwargs != nil {
				params["chat_template_kwargs"] = tc.kwargs
			}
			g, err := generate.New(c, generate.Options{Model: "Qwen/Qwen3-8B", API: "tokens", Params: params})
			if err != nil {
				t.Fatal(err)
			}
			task := &pipeline.Task{Messages: []pipeline.Message{{Role: pipeline.RoleUser, Content: tc.user}}, Tools: tc.tools}
			r := &pipeline.Rollout{Task: task, GroupID: "g", Messages: slices.Clone(task.Messages), Tools: tc.tools, NoSeed: true}
			ctx := context.Background()
			for i, tu := range tc.turns {
				if err := g.Turn(ctx, r); err != nil {
					t.Fatal(err)
				}
				if r.Status != pipeline.StatusPending {
					t.Fatalf("turn %d: %s %s", i+1, r.Status, r.Error)
				}
				for _, o := range tu.obs {
					o.Turn = i + 1
					r.Messages = append(r.Messages, o)
				}
			}
			r.Terminated = true
			r.Resolve(pipeline.StatusOK)
			if err := g.Observe(ctx, r); err != nil {
				t.Fatal(err)
			}
			if r.Error != "" {
				t.Fatalf("rollout: %s", r.Error)
			}
			if *qwen3Record != "" {
				// The references below are more /tokenize requests.
				qwen3References(t, c, r, tc)
				return
			}
			checkQwen3(t, c, r, tc)
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

// reference renders msgs whole with the case's template arguments, as a
// chat request of the same conversation would be rendered.
func reference(t *testing.T, c *openai.HTTPClient, msgs []pipeline.Message, tc q3case) []int32 {
	t.Helper()
	var args map[string]any
	if tc.kwargs != nil {
		args = map[string]any{"chat_template_kwargs": tc.kwargs}
	}
	ids, err := c.Tokenize(context.Background(), &inference.TokenizeRequest{Model: "Qwen/Qwen3-8B", Messages: msgs, Tools: tc.tools, AddGenerationPrompt: true, TemplateArgs: args})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// boundaries are the indexes of the assistant messages followed by an
// observation, and each observation's last message.
func boundaries(r *pipeline.Rollout) (replies, ends []int) {
	for i := 0; i < len(r.Messages); i++ {
		if r.Messages[i].Role != pipeline.RoleAssistant || i+1 == len(r.Messages) {
			continue
		}
		j := i + 1
		for j+1 < len(r.Messages) && r.Messages[j+1].Role != pipeline.RoleAssistant {
			j++
		}
		replies, ends = append(replies, i), append(ends, j)
	}
	return replies, ends
}

func qwen3References(t *testing.T, c *openai.HTTPClient, r *pipeline.Rollout, tc q3case) {
	_, ends := boundaries(r)
	for _, e := range ends {
		reference(t, c, r.Messages[:e+1], tc)
	}
}

func checkQwen3(t *testing.T, c *openai.HTTPClient, r *pipeline.Rollout, tc q3case) {
	t.Helper()
	row := r.Tokens()
	genPrompt := []int32{q3ImStart, q3Assistant, q3NL}
	if tc.kwargs != nil {
		genPrompt = append(genPrompt, q3Think, q3NLNL, q3ThinkEnd, q3NLNL)
	}
	if p := r.PromptTokenIDs; !slices.Equal(p[len(p)-len(genPrompt):], genPrompt) {
		t.Fatalf("the first prompt ends %v, want the generation prompt %v", p[max(len(p)-10, 0):], genPrompt)
	}
	replies, ends := boundaries(r)
	if len(replies) != len(tc.turns) {
		t.Fatalf("%d observations after replies, want %d", len(replies), len(tc.turns))
	}
	for k, ai := range replies {
		a := r.Messages[ai]
		obsEnd := int(r.Messages[ends[k]].TokenEnd)
		ref := reference(t, c, r.Messages[:ends[k]+1], tc)
		// from: where the template's closing starts in the row (at the
		// model's own end-of-turn token, or right after a reply that has
		// none).
		from := int(a.TokenEnd)
		if tc.turns[k].reply.eot {
			from--
			if row[from] != q3ImEnd {
				t.Fatalf("reply %d: the model's last token %d is not <|im_end|>", k+1, row[from])
			}
		}
		if row[from] != q3ImEnd || row[from+1] != q3NL {
			t.Fatalf("reply %d (%s): the turn is not closed: %v follow its text", k+1, tc.turns[k].reply.finish, row[from:min(from+3, len(row))])
		}
		if !tc.turns[k].reply.eot {
			for p := from; p < from+2; p++ {
				if r.LossMask[p-len(r.PromptTokenIDs)] != 0 {
					t.Fatalf("reply %d: the closing the model did not generate has mask 1", k+1)
				}
			}
		}
		tail := row[from:obsEnd]
		if len(ref) < len(tail) || !slices.Equal(ref[len(ref)-len(tail):], tail) {
			t.Fatalf("reply %d: the row after the reply's text is not the template's rendering of the conversation:\nrow %v\nref %v", k+1, tail, ref[max(len(ref)-len(tail), 0):])
		}
		if !slices.Equal(row[obsEnd-len(genPrompt):obsEnd], genPrompt) {
			t.Fatalf("reply %d: the observation ends %v, want the generation prompt %v", k+1, row[obsEnd-len(genPrompt):obsEnd], genPrompt)
		}
		if tc.turns[k].whole {
			whole := row[a.TokenStart:obsEnd]
			if !slices.Equal(ref[len(ref)-len(whole):], whole) {
				t.Fatalf("reply %d: the row from the reply on is not the template's rendering:\nrow %v\nref %v", k+1, whole, ref[len(ref)-len(whole):])
			}
		}
	}
	for i, m := range r.LossMask {
		p := len(r.PromptTokenIDs) + i
		in := false
		for _, ai := range replies {
			a := r.Messages[ai]
			in = in || p >= int(a.TokenStart) && p < int(a.TokenEnd)
		}
		if last := r.Messages[len(r.Messages)-1]; last.Role == pipeline.RoleAssistant {
			in = in || p >= int(last.TokenStart)
		}
		if (m == 1) != in {
			t.Fatalf("token %d: mask %d, generated %v", p, m, in)
		}
	}
}
