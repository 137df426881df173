// Command gateway measures what the agent gateway costs an agent: S
// concurrent sessions of a scripted multi-turn agent (K chat completions
// calls each, the conversation growing call by call, one function tool,
// JSON bodies as the OpenAI SDK writes them, with net/http) against the
// simulator served over HTTP on loopback, two ways:
//
//   - direct: each agent posts to the simulator's /v1/chat/completions;
//   - gateway: each agent posts to its own gateway session, whose Model
//     forwards the Call (messages, tools, params) to the same simulator
//     endpoint with net/http and returns the Answer.
//
// Direct and gateway runs alternate (-pairs pairs) in one process, against
// one simulator. It reports each run's throughput (calls/s, sessions/s),
// each pair's ratio gateway/direct and their median, and the gateway's
// added latency per call: the agent's latency less the Model's time for
// that call (p50, p99), and the gateway's own Stats().AddedLatency.
//
//	go run ./bench/gateway                # 1,000 sessions × 4 calls, 3 pairs
//	go run ./bench/gateway -stream        # the agents ask for streams
//	go run ./bench/gateway -quick         # smoke run, seconds
//
// The simulator does not stream: with -stream the gateway agents ask for a
// stream (the gateway synthesises it from the Model's whole answer) while
// the direct agents still get the simulator's whole answer, so the
// streaming synthesis, and the agents' reading of the chunks, are part of
// what the ratio charges the gateway.
//
// On a machine whose CPU is the bottleneck (1,000 sessions on 2 cores) the
// ratio is the direct path's CPU per call over the gateway path's, which
// the command also reports; BENCHMARKS.md explains every figure.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trajflow/trajflow/bench/internal/harness"
	"github.com/trajflow/trajflow/gateway"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
)

func main() { harness.Main(run) }

// Run is one run of S sessions, direct or through the gateway.
type Run struct {
	Mode     string  `json:"mode"` // "direct" or "gateway"
	Sessions int     `json:"sessions"`
	Calls    int     `json:"calls"`
	WallS    float64 `json:"wall_s"`
	CallsPS  float64 `json:"calls_per_s"`
	SessPS   float64 `json:"sessions_per_s"`
	// CPUMsPerCall is this process's CPU time (agents, gateway, Model,
	// simulator: getrusage) per call.
	CPUMsPerCall float64 `json:"cpu_ms_per_call"`
	// LatP50Ms, LatP99Ms are the agent-observed latencies per call.
	LatP50Ms float64 `json:"latency_p50_ms"`
	LatP99Ms float64 `json:"latency_p99_ms"`
	// ModelP50Ms is the Model's time per call (gateway runs).
	ModelP50Ms float64 `json:"model_p50_ms,omitempty"`
	// AddedP50Ms, AddedP99Ms: agent latency − Model time per call
	// (gateway runs).
	AddedP50Ms float64 `json:"added_p50_ms,omitempty"`
	AddedP99Ms float64 `json:"added_p99_ms,omitempty"`
	// StatsP50Ms, StatsP99Ms, StatsMeanMs: Server.Stats().AddedLatency
	// (bucket upper bounds; the mean is exact).
	StatsP50Ms  float64 `json:"stats_added_p50_ms,omitempty"`
	StatsP99Ms  float64 `json:"stats_added_p99_ms,omitempty"`
	StatsMeanMs float64 `json:"stats_added_mean_ms,omitempty"`
	// PromptTokens, CompletionTokens are the usage the agents saw.
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	ToolCalls        int64 `json:"tool_calls"`
}

// Pair is one direct run and the gateway run after it.
type Pair struct {
	Direct  Run     `json:"direct"`
	Gateway Run     `json:"gateway"`
	Ratio   float64 `json:"ratio"` // gateway calls/s ÷ direct calls/s
}

// Report is what a run of the command measured.
type Report struct {
	Sessions    int     `json:"sessions"`
	Calls       int     `json:"calls"`
	Stream      bool    `json:"stream"`
	TimeScale   float64 `json:"time_scale"`
	Pairs       []Pair  `json:"pairs"`
	MedianRatio float64 `json:"median_ratio"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "smoke run (50 sessions, 2 pairs)")
	sessions := fs.Int("sessions", 1000, "concurrent agent sessions")
	calls := fs.Int("calls", 4, "model calls per session")
	stream := fs.Bool("stream", false, "the gateway agents ask for streams (the simulator does not stream: direct agents do not)")
	timeScale := fs.Float64("time-scale", 0.01, "the simulator's time scale (0.01: with 1,000 calls arriving at once a call's simulated time is ~0.25 s, prefill included; ~30 ms of decoding)")
	pairs := fs.Int("pairs", 3, "direct/gateway pairs, alternated")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of pair N's gateway run to this path with .N appended (go tool pprof takes them all at once)")
	jsonPath := fs.String("json", "", "also write the report as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *quick {
		*sessions, *pairs = 50, 2
	}
	if *sessions < 1 || *calls < 1 || *pairs < 1 || *timeScale <= 0 {
		fmt.Fprintln(stderr, "gateway: -sessions, -calls and -pairs must be ≥ 1, -time-scale > 0")
		return 2
	}
	rep, err := measure(ctx, *sessions, *calls, *stream, *timeScale, *pairs, *cpuProfile, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "gateway:", err)
		return 1
	}
	write(stdout, rep)
	if *jsonPath != "" {
		data, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonPath, append(data, '\n'), 0o644); err != nil {
			fmt.Fprintln(stderr, "gateway:", err)
			return 1
		}
	}
	return 0
}

func write(w io.Writer, rep *Report) {
	streamNote := "non-streaming"
	if rep.Stream {
		streamNote = "gateway agents stream (stream_options.include_usage), direct agents get whole answers"
	}
	fmt.Fprintf(w, "%d sessions × %d calls, %s, simulator time scale %g, %d pairs (direct then gateway)\n\n",
		rep.Sessions, rep.Calls, streamNote, rep.TimeScale, len(rep.Pairs))
	fmt.Fprintln(w, "| pair | direct calls/s | gateway calls/s | ratio | direct sessions/s | gateway sessions/s | direct p50 ms | gateway p50 ms | model p50 ms | added p50 ms | added p99 ms | Stats added p50 / p99 / mean ms |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i, p := range rep.Pairs {
		d, g := p.Direct, p.Gateway
		fmt.Fprintf(w, "| pair %d | %.0f | %.0f | %.3f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f / %.2f / %.2f |\n",
			i+1, d.CallsPS, g.CallsPS, p.Ratio, d.SessPS, g.SessPS, d.LatP50Ms, g.LatP50Ms, g.ModelP50Ms, g.AddedP50Ms, g.AddedP99Ms, g.StatsP50Ms, g.StatsP99Ms, g.StatsMeanMs)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| pair | direct CPU ms/call | gateway CPU ms/call | gateway − direct CPU ms/call |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for i, p := range rep.Pairs {
		fmt.Fprintf(w, "| pair %d | %.3f | %.3f | %.3f |\n", i+1, p.Direct.CPUMsPerCall, p.Gateway.CPUMsPerCall, p.Gateway.CPUMsPerCall-p.Direct.CPUMsPerCall)
	}
	fmt.Fprintf(w, "\nmedian ratio gateway/direct: %.3f (target ≥ 0.97)\n", rep.MedianRatio)
	d, g := rep.Pairs[0].Direct, rep.Pairs[0].Gateway
	fmt.Fprintf(w, "tokens (pair 1): direct %d prompt + %d completion, %d tool calls; gateway %d prompt + %d completion, %d tool calls\n",
		d.PromptTokens, d.CompletionTokens, d.ToolCalls, g.PromptTokens, g.CompletionTokens, g.ToolCalls)
}

func measure(ctx context.Context, sessions, calls int, stream bool, timeScale float64, pairs int, cpuProfile string, log io.Writer) (*Report, error) {
	simSrv, err := harness.StartSim(sim.Options{Seed: 7, Preset: "short", TimeScale: timeScale, Capacity: sessions + 64})
	if err != nil {
		return nil, err
	}
	defer simSrv.Close()
	simURL := simSrv.URL + "/chat/completions"
	// The Model's connections to the engine: one long-lived pool, as
	// trajflow's generator keeps.
	modelTr := &http.Transport{MaxIdleConns: 2 * sessions, MaxIdleConnsPerHost: 2 * sessions}
	defer modelTr.CloseIdleConnections()
	modelClient := &http.Client{Transport: modelTr}

	// Warm up: one short run of each, unreported.
	fmt.Fprintln(log, "gateway: warm-up ...")
	if _, err := directRun(ctx, simURL, sessions, 1, false); err != nil {
		return nil, fmt.Errorf("warm-up direct: %w", err)
	}
	if _, err := gatewayRun(ctx, simURL, modelClient, sessions, 1, stream, ""); err != nil {
		return nil, fmt.Errorf("warm-up gateway: %w", err)
	}

	rep := &Report{Sessions: sessions, Calls: calls, Stream: stream, TimeScale: timeScale}
	var ratios []float64
	for i := range pairs {
		fmt.Fprintf(log, "gateway: pair %d/%d direct ...\n", i+1, pairs)
		d, err := directRun(ctx, simURL, sessions, calls, false)
		if err != nil {
			return nil, fmt.Errorf("direct: %w", err)
		}
		if err := simSrv.WaitIdle(ctx); err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "gateway: pair %d/%d gateway ...\n", i+1, pairs)
		prof := ""
		if cpuProfile != "" {
			prof = fmt.Sprintf("%s.%d", cpuProfile, i+1)
		}
		g, err := gatewayRun(ctx, simURL, modelClient, sessions, calls, stream, prof)
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		if err := simSrv.WaitIdle(ctx); err != nil {
			return nil, err
		}
		if g.CompletionTokens != d.CompletionTokens || g.ToolCalls != d.ToolCalls {
			return nil, fmt.Errorf("pair %d: the gateway's agents saw %d completion tokens and %d tool calls, the direct ones %d and %d: not the same work",
				i+1, g.CompletionTokens, g.ToolCalls, d.CompletionTokens, d.ToolCalls)
		}
		p := Pair{Direct: d, Gateway: g, Ratio: g.CallsPS / d.CallsPS}
		rep.Pairs = append(rep.Pairs, p)
		ratios = append(ratios, p.Ratio)
	}
	slices.Sort(ratios)
	rep.MedianRatio = ratios[len(ratios)/2]
	if len(ratios)%2 == 0 {
		rep.MedianRatio = (ratios[len(ratios)/2-1] + ratios[len(ratios)/2]) / 2
	}
	return rep, nil
}

// agentClient is the agents' HTTP client for one run: a fresh pool, so
// that every run's agents open their own connections (an agent is its
// own process with its own SDK client).
func agentClient(sessions int) (*http.Client, func()) {
	tr := &http.Transport{MaxIdleConns: 2 * sessions, MaxIdleConnsPerHost: 2 * sessions}
	return &http.Client{Transport: tr}, tr.CloseIdleConnections
}

// callTimes are one session's per-call times.
type callTimes struct {
	lat, model []time.Duration
	usage      usage
	toolCalls  int64
}

func directRun(ctx context.Context, simURL string, sessions, calls int, stream bool) (Run, error) {
	client, done := agentClient(sessions)
	defer done()
	times := make([]callTimes, sessions)
	start, cpu0 := time.Now(), harness.CPUTime()
	err := parallel(sessions, func(i int) error {
		a := newAgent(i, client, simURL, "", stream)
		return a.run(ctx, calls, &times[i], nil)
	})
	wall, cpu := time.Since(start), harness.CPUTime()-cpu0
	if err != nil {
		return Run{}, err
	}
	return summarize("direct", sessions, calls, wall, cpu, times, nil), nil
}

func gatewayRun(ctx context.Context, simURL string, modelClient *http.Client, sessions, calls int, stream bool, prof string) (Run, error) {
	gw := gateway.New(gateway.Options{Model: "sim"})
	if err := gw.Start(); err != nil {
		return Run{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = gw.Close(cctx)
	}()
	client, done := agentClient(sessions)
	defer done()
	times := make([]callTimes, sessions)
	if prof != "" {
		f, err := os.Create(prof)
		if err != nil {
			return Run{}, err
		}
		defer func() { _ = f.Close() }() // best effort: StopCPUProfile has written it
		if err := pprof.StartCPUProfile(f); err != nil {
			return Run{}, err
		}
		defer pprof.StopCPUProfile()
	}
	start, cpu0 := time.Now(), harness.CPUTime()
	err := parallel(sessions, func(i int) error {
		m := &forwarder{client: modelClient, url: simURL}
		s := gw.Open(m)
		defer s.End()
		a := newAgent(i, client, s.OpenAIBaseURL+"/chat/completions", s.Key, stream)
		return a.run(ctx, calls, &times[i], m)
	})
	wall, cpu := time.Since(start), harness.CPUTime()-cpu0
	if err != nil {
		return Run{}, err
	}
	st := gw.Stats()
	if want := int64(sessions * calls); st.Calls != want || st.Refused != 0 || st.Errors != 0 {
		return Run{}, fmt.Errorf("gateway stats: %d calls (want %d), %d refused, %d errors", st.Calls, want, st.Refused, st.Errors)
	}
	return summarize("gateway", sessions, calls, wall, cpu, times, &st.AddedLatency), nil
}

func summarize(mode string, sessions, calls int, wall, cpu time.Duration, times []callTimes, added *gateway.LatencySummary) Run {
	r := Run{Mode: mode, Sessions: sessions, Calls: sessions * calls, WallS: wall.Seconds()}
	r.CallsPS = float64(r.Calls) / wall.Seconds()
	r.SessPS = float64(sessions) / wall.Seconds()
	r.CPUMsPerCall = ms(cpu) / float64(r.Calls)
	var lat, model, add []time.Duration
	for _, t := range times {
		lat = append(lat, t.lat...)
		model = append(model, t.model...)
		for j := range t.model {
			add = append(add, t.lat[j]-t.model[j])
		}
		r.PromptTokens += int64(t.usage.PromptTokens)
		r.CompletionTokens += int64(t.usage.CompletionTokens)
		r.ToolCalls += t.toolCalls
	}
	r.LatP50Ms, r.LatP99Ms = ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99))
	if len(model) > 0 {
		r.ModelP50Ms = ms(quantile(model, 0.5))
		r.AddedP50Ms, r.AddedP99Ms = ms(quantile(add, 0.5)), ms(quantile(add, 0.99))
	}
	if added != nil {
		r.StatsP50Ms, r.StatsP99Ms, r.StatsMeanMs = ms(added.P50), ms(added.P99), ms(added.Mean)
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// parallel runs f(0..n-1) each on its own goroutine, all at once, and
// returns the first error.
func parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// The agent's wire types: OpenAI Chat Completions as the SDK writes and
// reads them.

type wireMessage struct {
	Role       string         `json:"role"`
	Content    *string        `json:"content"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type wireToolCall struct {
	Index    *int     `json:"index,omitempty"` // stream deltas only
	ID       string   `json:"id,omitempty"`
	Type     string   `json:"type,omitempty"`
	Function wireFunc `json:"function"`
}

type wireFunc struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatRequest is the body the OpenAI SDK sends, keys in its order.
type chatRequest struct {
	Messages      []wireMessage     `json:"messages"`
	Model         string            `json:"model"`
	Seed          int               `json:"seed"`
	Stream        bool              `json:"stream,omitempty"`
	StreamOptions *streamOptions    `json:"stream_options,omitempty"`
	Temperature   float64           `json:"temperature"`
	ToolChoice    string            `json:"tool_choice"`
	Tools         []json.RawMessage `json:"tools"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

type chatResponse struct {
	Choices []struct {
		Message      wireMessage `json:"message"`
		FinishReason string      `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

type chatChunk struct {
	Choices []struct {
		Delta struct {
			Content   *string        `json:"content"`
			ToolCalls []wireToolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

var tool = json.RawMessage(`{"type":"function","function":{"name":"bash","description":"Run a shell command in the task's sandbox and return its output.","parameters":{"type":"object","properties":{"command":{"type":"string","description":"The command line to run."}},"required":["command"]}}}`)

const systemPrompt = "You are a careful software engineer working in a sandboxed repository. Use the bash tool to inspect files and run tests; when you are done, answer with a short summary of the change you made."

// agent is one scripted agent: it sends its conversation, appends the
// answer, answers each tool call with a tool result (or, after a text
// answer, a user message), and calls again.
type agent struct {
	i      int
	client *http.Client
	url    string
	key    string
	stream bool
	msgs   []wireMessage
}

func newAgent(i int, client *http.Client, url, key string, stream bool) *agent {
	sys, user := systemPrompt, fmt.Sprintf("Task %d: the test TestParse%d in parser_test.go fails with an index out of range. Find the cause and fix it.", i, i)
	return &agent{i: i, client: client, url: url, key: key, stream: stream,
		msgs: []wireMessage{{Role: "system", Content: &sys}, {Role: "user", Content: &user}}}
}

func (a *agent) run(ctx context.Context, calls int, t *callTimes, m *forwarder) error {
	for k := range calls {
		t0 := time.Now()
		msg, u, err := a.call(ctx)
		lat := time.Since(t0)
		if err != nil {
			return fmt.Errorf("session %d call %d: %w", a.i, k+1, err)
		}
		t.lat = append(t.lat, lat)
		if m != nil {
			t.model = append(t.model, time.Duration(m.last.Load()))
		}
		t.usage.PromptTokens += u.PromptTokens
		t.usage.CompletionTokens += u.CompletionTokens
		a.msgs = append(a.msgs, msg)
		if len(msg.ToolCalls) == 0 {
			next := "Go on: run the tests again and fix what still fails."
			a.msgs = append(a.msgs, wireMessage{Role: "user", Content: &next})
			continue
		}
		for _, tc := range msg.ToolCalls {
			t.toolCalls++
			out := fmt.Sprintf("$ %s\n--- FAIL: TestParse%d (0.00s)\npanic: runtime error: index out of range [%d] with length %d\nparser.go:%d +0x1d\nFAIL\texample.com/parser\t0.012s", tc.Function.Arguments, a.i, k+3, k+3, 40+k)
			a.msgs = append(a.msgs, wireMessage{Role: "tool", Content: &out, ToolCallID: tc.ID})
		}
	}
	return nil
}

// call posts the conversation and reads the answer.
func (a *agent) call(ctx context.Context) (wireMessage, usage, error) {
	body := chatRequest{Messages: a.msgs, Model: "sim", Seed: a.i, Temperature: 1, ToolChoice: "auto", Tools: []json.RawMessage{tool}}
	if a.stream {
		body.Stream, body.StreamOptions = true, &streamOptions{IncludeUsage: true}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return wireMessage{}, usage{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url, bytes.NewReader(data))
	if err != nil {
		return wireMessage{}, usage{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if a.key != "" {
		req.Header.Set("Authorization", "Bearer "+a.key)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return wireMessage{}, usage{}, err
	}
	defer func() { _ = resp.Body.Close() }() // best effort: read to the end below
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return wireMessage{}, usage{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	if a.stream {
		return readStream(resp.Body)
	}
	var cr chatResponse
	if err := json.NewDecoder(resp.Body).Decode(&cr); err != nil {
		return wireMessage{}, usage{}, err
	}
	if len(cr.Choices) != 1 || cr.Usage == nil {
		return wireMessage{}, usage{}, errors.New("want one choice and usage")
	}
	return cr.Choices[0].Message, *cr.Usage, nil
}

// readStream reads Chat Completions chunks to data: [DONE], as the SDK's
// stream accumulator does.
func readStream(r io.Reader) (wireMessage, usage, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var content strings.Builder
	var calls []wireToolCall
	var u *usage
	finished := false
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			if !finished || u == nil {
				return wireMessage{}, usage{}, errors.New("stream ended without a finish reason and usage")
			}
			msg := wireMessage{Role: "assistant", ToolCalls: calls}
			if c := content.String(); c != "" || len(calls) == 0 {
				msg.Content = &c
			}
			return msg, *u, nil
		}
		var ch chatChunk
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			return wireMessage{}, usage{}, fmt.Errorf("chunk: %w", err)
		}
		if ch.Usage != nil {
			u = ch.Usage
		}
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				content.WriteString(*c.Delta.Content)
			}
			for _, d := range c.Delta.ToolCalls {
				if d.Index == nil {
					return wireMessage{}, usage{}, errors.New("a tool call delta without an index")
				}
				for len(calls) <= *d.Index {
					calls = append(calls, wireToolCall{})
				}
				tc := &calls[*d.Index]
				if d.ID != "" {
					tc.ID, tc.Type, tc.Function.Name = d.ID, d.Type, d.Function.Name
				}
				tc.Function.Arguments += d.Function.Arguments
			}
			if c.FinishReason != nil {
				finished = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return wireMessage{}, usage{}, err
	}
	return wireMessage{}, usage{}, errors.New("stream ended before data: [DONE]")
}

// forwarder is a session's Model: it posts the Call to the engine's
// /v1/chat/completions with net/http and returns the Answer. last is the
// time its last call took (a session's calls come one at a time).
type forwarder struct {
	client *http.Client
	url    string
	last   atomic.Int64
}

// engineRequest is the Call as a Chat Completions body.
type engineRequest struct {
	Model    string            `json:"model"`
	Messages []wireMessage     `json:"messages"`
	Tools    []json.RawMessage `json:"tools,omitempty"`
}

func (f *forwarder) Call(ctx context.Context, c *gateway.Call) (*gateway.Answer, error) {
	t0 := time.Now()
	defer func() { f.last.Store(int64(time.Since(t0))) }()
	msgs := make([]wireMessage, len(c.Messages))
	for i, m := range c.Messages {
		content := m.Content
		w := wireMessage{Role: m.Role, Content: &content, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			w.ToolCalls = append(w.ToolCalls, wireToolCall{ID: tc.ID, Type: tc.Type, Function: wireFunc{Name: tc.Name, Arguments: tc.Arguments}})
		}
		msgs[i] = w
	}
	// The params under their Chat Completions names, then the fields.
	raw, err := json.Marshal(engineRequest{Model: "sim", Messages: msgs, Tools: c.Tools})
	if err != nil {
		return nil, err
	}
	body := map[string]json.RawMessage{}
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, err
	}
	for k, v := range c.Params {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		body[k] = b
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }() // best effort: decoded below
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, &gateway.CallError{Status: resp.StatusCode, Message: string(b)}
	}
	var cr chatResponse
	if err := json.NewDecoder(resp.Body).Decode(&cr); err != nil {
		return nil, err
	}
	if len(cr.Choices) != 1 || cr.Usage == nil {
		return nil, errors.New("the engine's answer has no single choice or no usage")
	}
	ch := cr.Choices[0]
	a := &gateway.Answer{FinishReason: ch.FinishReason, PromptTokens: cr.Usage.PromptTokens, CompletionTokens: cr.Usage.CompletionTokens}
	a.Message.Role = pipeline.RoleAssistant
	if ch.Message.Content != nil {
		a.Message.Content = *ch.Message.Content
	}
	for _, tc := range ch.Message.ToolCalls {
		a.Message.ToolCalls = append(a.Message.ToolCalls, pipeline.ToolCall{ID: tc.ID, Type: tc.Type, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return a, nil
}
