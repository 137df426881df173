package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

func chatReq(seed int64, msgs ...pipeline.Message) *inference.Request {
	return &inference.Request{Model: "sim", Messages: msgs, Params: map[string]any{"seed": seed}}
}

func user(s string) pipeline.Message { return pipeline.Message{Role: pipeline.RoleUser, Content: s} }
func system(s string) pipeline.Message {
	return pipeline.Message{Role: pipeline.RoleSystem, Content: s}
}

func mustComplete(t *testing.T, s *Server, req *inference.Request) *inference.Response {
	t.Helper()
	resp, err := s.Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	return resp
}

func TestTokenizeRoundTrip(t *testing.T) {
	for _, s := range []string{
		"", "hello world", "The answer is \\boxed{42}", "  two  spaces\n\tand tabs ",
		"héllo wörld — ünïcode ✓", "x=1;y=2", "What is 12 + 7 * 3?", "bako dure", "\x00\xff",
	} {
		ids := Tokenize(s)
		if got := Detokenize(ids, false); got != s {
			t.Errorf("Detokenize(Tokenize(%q)) = %q", s, got)
		}
		for _, id := range ids {
			if id < 0 || int(id) >= VocabSize() || (id >= 256 && id < firstPiece) {
				t.Errorf("%q: id %d out of range", s, id)
			}
		}
	}
	// Vocabulary words are one token each, with or without a leading space.
	if got := Tokenize("The answer is"); len(got) != 3 {
		t.Errorf("Tokenize(%q) = %v, want 3 ids", "The answer is", got)
	}
}

// TestTokenizeAround: the filler's ids laid between a prefix and a suffix
// are the ids of the whole text, for every prefix and suffix a reply has.
func TestTokenizeAround(t *testing.T) {
	for _, prefix := range []string{"", thinkOpen} {
		for _, suffix := range []string{"", thinkClose, thinkClose + "\n" + "The answer is \\boxed{42}", " The answer is \\boxed{-3}", "\n<tool_call>{\"name\": \"x\"}</tool_call>", " The image has 12 bytes: \\boxed{12}"} {
			for n := range 40 {
				text, ids := fillerWords(n, func(i int) uint64 { return mix(key(uint64(n), uint64(i))) })
				got := tokenizeAround(prefix, ids, suffix)
				if want := Tokenize(prefix + text + suffix); !slices.Equal(got, want) {
					t.Fatalf("prefix %q, %d words, suffix %q: %v, Tokenize gives %v", prefix, n, suffix, got, want)
				}
			}
		}
	}
}

func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"", "a b", "What is (3+4)*2?", "\\boxed{-7}", "ü\n\t  x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := Tokenize(s)
		if got := Detokenize(ids, false); got != s {
			t.Fatalf("Detokenize(Tokenize(%q)) = %q", s, got)
		}
		if again := Tokenize(Detokenize(ids, false)); !slices.Equal(again, ids) {
			t.Fatalf("not stable: %v then %v", ids, again)
		}
	})
}

func TestFindArithmetic(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"What is 12 + 7 * 3?", "33", true},
		{"Compute (2 + 3) * (4 - 1).", "15", true},
		{"What is 7 / 2?", "7/2", true},
		{"What is 8 / 2 - -3?", "7", true},
		{"Step 1: what is 10 - 20?", "-10", true},
		{"What is 5 / 0?", "", false},
		{"No numbers here", "", false},
		{"Just 42.", "", false},
		{"Unbalanced (3 + 4", "", false},
	} {
		got, ok := FindArithmetic(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("FindArithmetic(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzFindArithmetic(f *testing.F) {
	for _, s := range []string{"What is 1+2?", "((((1))))*-2", "9/3/0", strings.Repeat("(", 200) + "1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := FindArithmetic(s)
		if ok && v == "" {
			t.Fatal("ok with empty value")
		}
	})
}

func TestDeterminism(t *testing.T) {
	msgs := []pipeline.Message{system("Be brief."), user("What is 3 + 4?")}
	a := mustComplete(t, New(Options{Seed: 7}), chatReq(11, msgs...))
	b := mustComplete(t, New(Options{Seed: 7}), chatReq(11, msgs...))
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different replies:\n%+v\n%+v", a, b)
	}
	c := mustComplete(t, New(Options{Seed: 7}), chatReq(12, msgs...))
	d := mustComplete(t, New(Options{Seed: 8}), chatReq(11, msgs...))
	if slices.Equal(a.Message.TokenIDs, c.Message.TokenIDs) || slices.Equal(a.Message.TokenIDs, d.Message.TokenIDs) {
		t.Fatal("different request seed or sim seed gave the same tokens")
	}
}

func TestReplyShape(t *testing.T) {
	s := New(Options{Seed: 1})
	for seed := int64(0); seed < 50; seed++ {
		r := mustComplete(t, s, chatReq(seed, user("What is 12 + 7 * 3?")))
		m := r.Message
		if len(m.TokenIDs) != len(m.Logprobs) || len(m.TokenIDs) != r.CompletionTokens {
			t.Fatalf("ids %d logprobs %d completion_tokens %d", len(m.TokenIDs), len(m.Logprobs), r.CompletionTokens)
		}
		for _, lp := range m.Logprobs {
			if lp >= 0 {
				t.Fatalf("logprob %g >= 0", lp)
			}
		}
		if !slices.Equal(r.PromptTokenIDs, RenderChat([]pipeline.Message{user("What is 12 + 7 * 3?")})) || r.PromptTokens != len(r.PromptTokenIDs) {
			t.Fatal("prompt token ids are not the chat rendering")
		}
		switch r.FinishReason {
		case "stop":
			if m.TokenIDs[len(m.TokenIDs)-1] != TokEnd {
				t.Fatal("stop without the end token")
			}
			if Detokenize(m.TokenIDs, true) != m.Content {
				t.Fatalf("ids detokenize to %q, content %q", Detokenize(m.TokenIDs, true), m.Content)
			}
			if !strings.Contains(m.Content, `The answer is \boxed{`) {
				t.Fatalf("no boxed answer in %q", m.Content)
			}
		case "length":
		default:
			t.Fatalf("finish reason %q", r.FinishReason)
		}
		var tr Trailer
		if err := json.Unmarshal(r.Extra, &tr); err != nil {
			t.Fatal(err)
		}
		if tr.Correct != strings.HasSuffix(m.Content, `\boxed{33}`) && r.FinishReason == "stop" {
			t.Fatalf("trailer correct %v but content %q", tr.Correct, m.Content)
		}
	}
}

func TestMaxTokensCaps(t *testing.T) {
	s := New(Options{Seed: 1, Preset: "reasoning"})
	req := chatReq(3, user("Tell me a story."))
	req.Params["max_tokens"] = 17
	r := mustComplete(t, s, req)
	if r.FinishReason != "length" || len(r.Message.TokenIDs) != 17 {
		t.Fatalf("finish %q with %d tokens, want length with 17", r.FinishReason, len(r.Message.TokenIDs))
	}
	if !slices.Equal(Tokenize(r.Message.Content), r.Message.TokenIDs) {
		t.Fatal("capped content does not tokenize back to its ids")
	}
}

func TestLengthModel(t *testing.T) {
	// σ = 0: every reply has exactly the median's length.
	s := New(Options{Seed: 2, Length: LengthModel{Median: 40, Cap: 1000}})
	for seed := int64(0); seed < 5; seed++ {
		r := mustComplete(t, s, chatReq(seed, user(fmt.Sprintf("prompt %d", seed))))
		if len(r.Message.TokenIDs) != 40 || r.FinishReason != "stop" {
			t.Fatalf("%d tokens (%s), want 40 (stop)", len(r.Message.TokenIDs), r.FinishReason)
		}
	}
	// The reasoning preset's median is near 2000.
	s = New(Options{Seed: 2, Preset: "reasoning"})
	var lens []int
	for i := 0; i < 201; i++ {
		r := mustComplete(t, s, chatReq(int64(i), user(fmt.Sprintf("task %d", i))))
		lens = append(lens, r.CompletionTokens)
	}
	slices.Sort(lens)
	if med := lens[100]; med < 1400 || med > 2800 {
		t.Fatalf("median length %d, want about 2000", med)
	}
}

func TestTokenContinuity(t *testing.T) {
	s := New(Options{Seed: 5, Preset: "agent"})
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"q":{"type":"string"},"k":{"type":"integer"}},"required":["q","k"]}}}`)}
	msgs := []pipeline.Message{system("You are an agent."), user("Find the answer: what is 2 * 21?")}
	var prev []int32
	sawTool := false
	for turn := 0; turn < 6; turn++ {
		req := chatReq(9, msgs...)
		req.Tools = tools
		req.Params["max_tokens"] = 300
		r := mustComplete(t, s, req)
		if prev != nil && !slices.Equal(r.PromptTokenIDs[:len(prev)], prev) {
			t.Fatalf("turn %d: prompt does not start with the previous prompt + generated ids", turn)
		}
		var tr Trailer
		_ = json.Unmarshal(r.Extra, &tr)
		if r.FinishReason == "tool_calls" {
			sawTool = true
			tc := r.Message.ToolCalls[0]
			if tc.Name != "search" || tc.Arguments != `{"k": 1, "q": "sim"}` {
				t.Fatalf("tool call %+v", tc)
			}
		}
		prev = append(slices.Clone(r.PromptTokenIDs), r.Message.TokenIDs...)
		// The client sends the assistant message back unchanged (content and
		// tool calls, not the ids), then an observation.
		back := pipeline.Message{Role: pipeline.RoleAssistant, Content: r.Message.Content, ToolCalls: r.Message.ToolCalls}
		obs := pipeline.Message{Role: pipeline.RoleTool, Content: fmt.Sprintf("result %d", turn)}
		if len(r.Message.ToolCalls) == 0 {
			obs = user("Try again.")
		}
		msgs = append(msgs, back, obs)
	}
	if !sawTool {
		t.Error("no tool call in 6 turns at rate 0.5")
	}
}

func TestTrailerWorkload(t *testing.T) {
	s := New(Options{Seed: 3, Preset: "agent", TimeScale: 0})
	r1 := mustComplete(t, s, chatReq(4, user("task")))
	var t1 Trailer
	_ = json.Unmarshal(r1.Extra, &t1)
	if t1.TurnsLeft < 1 || t1.TurnsLeft > 7 || t1.ObsTokens < 1 {
		t.Fatalf("agent trailer %+v: want 1..7 turns left and observations", t1)
	}
	// time scale 0: no env delay
	if t1.EnvDelayMs != 0 {
		t.Fatalf("env delay %g at time scale 0", t1.EnvDelayMs)
	}
	s2 := New(Options{Seed: 3, Preset: "agent", TimeScale: 0.1})
	defer s2.Close()
	r2 := mustComplete(t, s2, chatReq(4, user("task")))
	var t2 Trailer
	_ = json.Unmarshal(r2.Extra, &t2)
	if t2.TurnsLeft != t1.TurnsLeft || t2.ObsTokens != t1.ObsTokens || t2.EnvDelayMs <= 0 {
		t.Fatalf("trailers differ across time scales: %+v vs %+v", t1, t2)
	}
	// One turn later, one turn less.
	r3 := mustComplete(t, s, chatReq(4, user("task"), pipeline.Message{Role: "assistant", Content: r1.Message.Content}, user("obs")))
	var t3 Trailer
	_ = json.Unmarshal(r3.Extra, &t3)
	if t3.TurnsLeft != t1.TurnsLeft-1 || t3.Correct != t1.Correct {
		t.Fatalf("turn 2 trailer %+v after %+v", t3, t1)
	}
	// Single-turn presets: no turns left.
	r4 := mustComplete(t, New(Options{Seed: 3}), chatReq(4, user("task")))
	var t4 Trailer
	_ = json.Unmarshal(r4.Extra, &t4)
	if t4.TurnsLeft != 0 || t4.ObsTokens != 0 || t4.EnvDelayMs != 0 {
		t.Fatalf("short trailer %+v", t4)
	}
}

func TestAccuracy(t *testing.T) {
	for _, acc := range []float64{0.2, 0.8} {
		s := New(Options{Seed: 1, Accuracy: acc, Length: LengthModel{Median: 20, Cap: 100}})
		right, total := 0, 0
		for task := 0; task < 100; task++ {
			q := fmt.Sprintf("What is %d + %d?", task, 2*task+1)
			want := fmt.Sprintf(`\boxed{%d}`, 3*task+1)
			for seed := int64(0); seed < 8; seed++ {
				r := mustComplete(t, s, chatReq(seed, user(q)))
				total++
				if strings.HasSuffix(r.Message.Content, want) {
					right++
				}
			}
		}
		if got := float64(right) / float64(total); got < acc-0.12 || got > acc+0.12 {
			t.Errorf("accuracy %g: %d/%d right", acc, right, total)
		}
	}
}

func TestKeepGroups(t *testing.T) {
	const n, tasks = 8, 200
	for _, tc := range []struct {
		name string
		opts Options
		req  func(task, attempt, r int) *inference.Request
	}{
		{"extras", Options{Seed: 1, Keep: 0.3}, func(task, attempt, r int) *inference.Request {
			req := chatReq(int64(1000*task+r), user(fmt.Sprintf("What is %d * 3?", task)))
			req.Params["sim_group_size"] = n
			req.Params["sim_rollout_index"] = r
			req.Params["sim_attempt"] = attempt
			return req
		}},
		{"seed offset", Options{Seed: 1, Keep: 0.3, GroupSize: n, BaseSeed: 100}, func(task, attempt, r int) *inference.Request {
			return chatReq(int64(100+attempt*n+r), user(fmt.Sprintf("What is %d * 3?", task)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.opts)
			mixed, changed := 0, 0
			for task := 0; task < tasks; task++ {
				var pattern [2][]bool
				for attempt := 0; attempt < 2; attempt++ {
					right := 0
					for r := 0; r < n; r++ {
						resp := mustComplete(t, s, tc.req(task, attempt, r))
						var tr Trailer
						_ = json.Unmarshal(resp.Extra, &tr)
						want := fmt.Sprintf(`\boxed{%d}`, 3*task)
						if resp.FinishReason == "stop" && tr.Correct != strings.HasSuffix(resp.Message.Content, want) {
							t.Fatalf("trailer says %v for %q", tr.Correct, resp.Message.Content)
						}
						pattern[attempt] = append(pattern[attempt], tr.Correct)
						if tr.Correct {
							right++
						}
					}
					if right > 0 && right < n && attempt == 0 {
						mixed++
					}
				}
				if !slices.Equal(pattern[0], pattern[1]) {
					changed++
				}
			}
			if changed == 0 {
				t.Error("a new attempt never changes a group's outcome")
			}
			if got := float64(mixed) / tasks; got < 0.2 || got > 0.4 {
				t.Errorf("%d of %d groups mixed, want about 30%%", mixed, tasks)
			}
		})
	}
	// Keep 0 and 1 are exact.
	for _, keep := range []float64{0, 1} {
		s := New(Options{Seed: 4, Keep: keep, GroupSize: n})
		for task := 0; task < 50; task++ {
			right := 0
			for r := 0; r < n; r++ {
				resp := mustComplete(t, s, chatReq(int64(r), user(fmt.Sprintf("What is %d - 1?", task))))
				var tr Trailer
				_ = json.Unmarshal(resp.Extra, &tr)
				if tr.Correct {
					right++
				}
			}
			if mixed := right > 0 && right < n; mixed != (keep == 1) {
				t.Fatalf("keep %g: task %d has %d/%d right", keep, task, right, n)
			}
		}
	}
}

func TestContextLength(t *testing.T) {
	s := New(Options{Seed: 1, MaxModelLen: 50})
	req := chatReq(1, user(strings.Repeat("the ", 20)))
	req.Params["max_tokens"] = 40
	_, err := s.Complete(context.Background(), req)
	var le *inference.Error
	if !errors.As(err, &le) || le.Class != inference.ClassContextLength || le.Status != 400 ||
		!strings.HasPrefix(le.Msg, "This model's maximum context length is 50 tokens. However, you requested") {
		t.Fatalf("err = %v", err)
	}
	// Without max_tokens the reply is capped to what fits.
	delete(req.Params, "max_tokens")
	r := mustComplete(t, s, req)
	if r.PromptTokens+r.CompletionTokens > 50 {
		t.Fatalf("%d + %d tokens exceed 50", r.PromptTokens, r.CompletionTokens)
	}
}

func TestBadParams(t *testing.T) {
	s := New(Options{})
	for _, p := range []map[string]any{
		{"seed": "x"}, {"max_tokens": 0}, {"max_tokens": 1.5}, {"sim_group_size": 0},
		{"sim_group_size": 2, "sim_rollout_index": 2},
	} {
		_, err := s.Complete(context.Background(), &inference.Request{Messages: []pipeline.Message{user("hi")}, Params: p})
		var le *inference.Error
		if !errors.As(err, &le) || le.Status != 400 {
			t.Errorf("params %v: err = %v, want a 400", p, err)
		}
	}
	if _, err := s.Complete(context.Background(), &inference.Request{}); err == nil {
		t.Error("no messages: no error")
	}
}

func TestInProcessFaults(t *testing.T) {
	for _, tc := range []struct {
		faults Faults
		class  string
	}{
		{Faults{Errors: map[int]float64{429: 1}}, inference.ClassRateLimited},
		{Faults{Errors: map[int]float64{503: 1}}, inference.ClassServer},
		{Faults{Errors: map[int]float64{404: 1}}, inference.ClassHTTP},
		{Faults{Reset: 1}, inference.ClassConnection},
		{Faults{Malformed: 1}, inference.ClassBadResponse},
	} {
		s := New(Options{Faults: tc.faults})
		_, err := s.Complete(context.Background(), chatReq(1, user("hi")))
		if got := inference.ErrorClass(err); got != tc.class {
			t.Errorf("faults %v: class %q (%v), want %q", tc.faults, got, err, tc.class)
		}
	}
	// Fault draws are deterministic and near their rate.
	count := func() (n int) {
		s := New(Options{Seed: 9, Faults: Faults{Errors: map[int]float64{500: 0.25}}})
		for i := 0; i < 400; i++ {
			if _, err := s.Complete(context.Background(), chatReq(int64(i), user("hi"))); err != nil {
				n++
			}
		}
		return n
	}
	a, b := count(), count()
	if a != b || a < 60 || a > 140 {
		t.Fatalf("failures %d and %d of 400 at rate 0.25", a, b)
	}
}

func TestParseFaults(t *testing.T) {
	var f Faults
	if err := ParseFaults("429=0.1, 500=0.05,503=0.05,reset=0.01,stall=0.02,stall_for=3s,malformed=0.03,truncate=0.04,retry_after=2s", &f); err != nil {
		t.Fatal(err)
	}
	want := Faults{Errors: map[int]float64{429: 0.1, 500: 0.05, 503: 0.05}, Reset: 0.01, Stall: 0.02, StallFor: 3 * time.Second,
		Malformed: 0.03, Truncate: 0.04, RetryAfter: 2 * time.Second}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("got %+v", f)
	}
	if got := f.String(); got != "429=0.1,500=0.05,503=0.05,reset=0.01,stall=0.02,malformed=0.03,truncate=0.04" {
		t.Fatalf("String() = %q", got)
	}
	for _, bad := range []string{"429", "200=0.1", "429=2", "reset=x", "stall_for=soon", "500=0.6,503=0.6", "teapot=0.1"} {
		var f Faults
		if err := ParseFaults(bad, &f); err == nil {
			t.Errorf("ParseFaults(%q): no error", bad)
		}
	}
}

func FuzzParseFaults(f *testing.F) {
	for _, s := range []string{"429=0.1,500=0.05", "reset=1", "stall_for=1s", ",,", "=="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var fl Faults
		if err := ParseFaults(s, &fl); err != nil {
			return
		}
		if fl.total() > 1+1e-9 {
			t.Fatalf("accepted total %g", fl.total())
		}
		var again Faults
		if err := ParseFaults(fl.String(), &again); err != nil {
			t.Fatalf("String() %q does not parse: %v", fl.String(), err)
		}
	})
}

func TestOptionsFrom(t *testing.T) {
	o := OptionsFrom(Config{Seed: 3, Preset: "agent", Accuracy: 0.7, TimeScale: 0.05, Keep: 0.5,
		Capacity: 32, MaxModelLen: 4096, Turns: []int{2, 4}, EnvDelay: pipeline.Duration(time.Second), ObsTokens: 64})
	want := Options{Seed: 3, Preset: "agent", Accuracy: 0.7, TimeScale: 0.05, Keep: 0.5, Capacity: 32,
		MaxModelLen: 4096, MinTurns: 2, MaxTurns: 4, EnvDelay: time.Second, ObsTokens: 64}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("OptionsFrom = %+v", o)
	}
	r := New(Options{}).Options()
	if r.Capacity != 256 || r.A != 4500*time.Microsecond || r.C != 45*time.Microsecond || r.P != 30*time.Microsecond ||
		r.Length != Presets["short"] || r.Accuracy != 0.6 || r.MinTurns != 1 || r.MaxTurns != 1 {
		t.Fatalf("defaults %+v", r)
	}
}

// TestTimedBatching runs the timed server (time scale 1) with B concurrent
// requests: the model, not the wall clock, is asserted (steps, occupancy).
func TestTimedBatching(t *testing.T) {
	const B = 16
	s := New(Options{Seed: 1, TimeScale: 1, Capacity: B, A: 200 * time.Microsecond, C: time.Microsecond, P: time.Nanosecond,
		Length: LengthModel{Median: 30, Cap: 100}})
	defer s.Close()
	errs := make(chan error, 2*B)
	for i := 0; i < 2*B; i++ {
		go func(i int) {
			_, err := s.Complete(context.Background(), chatReq(int64(i), user(fmt.Sprintf("task %d", i))))
			errs <- err
		}(i)
	}
	for i := 0; i < 2*B; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.Requests != 2*B || st.DecodedTokens != 2*B*30 || st.Running != 0 || st.Queued != 0 {
		t.Fatalf("stats %+v", st)
	}
	// 32 requests of 30 tokens through 16 slots: at least 60 steps, and
	// never more than one request per step.
	if st.Steps < 60 || st.Steps > 2*B*30 || st.MeanBatch > B {
		t.Fatalf("steps %d mean batch %g", st.Steps, st.MeanBatch)
	}
}

func TestCancelLeavesBatch(t *testing.T) {
	s := New(Options{Seed: 1, TimeScale: 1, Length: LengthModel{Median: 2e5, Cap: 1 << 20}})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Complete(ctx, chatReq(1, user("long")))
		errc <- err
	}()
	waitFor(t, func() bool { return s.Stats().Running == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || inference.ErrorClass(err) != inference.ClassCancelled {
		t.Fatalf("err = %v", err)
	}
	waitFor(t, func() bool { st := s.Stats(); return st.Running == 0 && st.Cancelled == 1 })
}

func TestClose(t *testing.T) {
	s := New(Options{Seed: 1, TimeScale: 1, Length: LengthModel{Median: 2e5, Cap: 1 << 20}})
	errc := make(chan error, 1)
	go func() {
		_, err := s.Complete(context.Background(), chatReq(1, user("long")))
		errc <- err
	}()
	waitFor(t, func() bool { return s.Stats().Running == 1 })
	s.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
	if _, err := s.Complete(context.Background(), chatReq(1, user("x"))); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// waitFor polls cond (for state changes of a real server; not a timing
// assertion: the bound only guards against hangs).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}
