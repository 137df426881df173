package runner_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
)

// promptServer is an OpenAI-shaped server that answers each request for
// the prompt "qI" (the last message, or the completions prompt) with
// reply(I, N), a whole response body, N counting that prompt's tries from 1.
func promptServer(t *testing.T, reply func(i, n int) string) *httptest.Server {
	var mu sync.Mutex
	tries := map[string]int{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Write([]byte(`{"data":[{"id":"m"}]}`))
			return
		}
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
			Prompt   string                     `json:"prompt"`
		}
		body, _ := io.ReadAll(r.Body)
		json.Unmarshal(body, &req)
		prompt := req.Prompt
		if len(req.Messages) > 0 {
			prompt = req.Messages[len(req.Messages)-1].Content
		}
		mu.Lock()
		tries[prompt]++
		n := tries[prompt]
		mu.Unlock()
		var i int
		fmt.Sscanf(prompt, "q%d", &i)
		io.WriteString(w, reply(i, n))
	}))
	t.Cleanup(hs.Close)
	return hs
}

// A reply that does not match params.response_format's schema never
// becomes an ok row: it is sent again up to generate.invalid_retries
// times (its tokens counted), and a row with no valid reply is an error
// of class invalid_output naming the schema path.
func TestStructuredOutputNeverOK(t *testing.T) {
	hs := promptServer(t, func(i, n int) string {
		// Every third prompt never gets a valid reply, the next one only
		// at its second try.
		content := `{"answer": 7}`
		switch {
		case i%3 == 0:
			content = `{"answer": "seven"}`
		case i%3 == 1 && n == 1:
			content = `The answer is 7.`
		}
		b, _ := json.Marshal(content)
		return fmt.Sprintf(`{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}}`, b)
	})
	input, _ := writeBatchInput(t, t.TempDir(), 30)
	format := `{type: json_schema, json_schema: {name: a, schema: {type: object, required: [answer], properties: {answer: {type: integer}}}}}`
	cfg := batchConfig(t, input, hs.URL, "generate.params.response_format="+format, "generate.invalid_retries=1")
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	rows := append(readBack(t, cfg.Output.Dir, schema.DataDir), readBack(t, cfg.Output.Dir, schema.ErrorsDir)...)
	var ok, invalid int
	for _, r := range rows {
		if r.Task.Fields == nil {
			json.Unmarshal(r.Task.Raw, &r.Task.Fields)
		}
		if r.Task.Fields["url"] != "/v1/chat/completions" || strings.Contains(string(r.Task.Raw), `"stream":true`) || strings.Contains(string(r.Task.Raw), `"method":"GET"`) {
			continue // the completions lines and the bad lines
		}
		var i int
		fmt.Sscanf(r.Task.Fields["custom_id"].(string), "req-%d", &i)
		if r.Status == "ok" {
			ok++
			var v struct{ Answer json.Number }
			last := r.Messages[len(r.Messages)-1].Content
			if err := json.Unmarshal([]byte(last), &v); err != nil || v.Answer != "7" {
				t.Fatalf("row %d is ok with the reply %q", i, last)
			}
			if i%3 == 1 && (r.Metrics["discarded_replies"] != 1 || r.Metrics["discarded_prompt_tokens"] != 11 || r.Metrics["discarded_completion_tokens"] != 5) {
				t.Fatalf("row %d: metrics %v, want the thrown-away try counted", i, r.Metrics)
			}
			continue
		}
		if i%3 != 0 || r.ErrorClass != "invalid_output" || !strings.Contains(r.Error, "schema path /properties/answer/type") {
			t.Fatalf("row %d: %s %s %q", i, r.Status, r.ErrorClass, r.Error)
		}
		if r.Metrics["discarded_replies"] != 2 || r.Metrics["discarded_completion_tokens"] != 10 {
			t.Fatalf("row %d: metrics %v, want both tries counted", i, r.Metrics)
		}
		invalid++
	}
	if ok == 0 || invalid == 0 {
		t.Fatalf("%d ok, %d invalid rows: the test checks neither", ok, invalid)
	}
}

// The cost in the summary is the price times the tokens in the rows
// (read back from Parquet): prompt tokens (those served from the prompt
// cache at the cached price), completion tokens, and the tokens of the
// replies thrown away; metrics.json's is that of its rows, data and
// errors.
func TestCostEqualsPriceTimesRowTokens(t *testing.T) {
	hs := promptServer(t, func(i, n int) string {
		content := `{"answer": 7}`
		if i%4 == 1 && n == 1 {
			content = `nope`
		}
		b, _ := json.Marshal(content)
		// Prompt and completion tokens vary by line; every other line has
		// part of its prompt cached.
		return fmt.Sprintf(`{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%s},"text":%s,"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
			b, b, 100+i, 10+i%7, (i%2)*64)
	})
	input, _ := writeBatchInput(t, t.TempDir(), 60)
	format := `{type: json_schema, json_schema: {name: a, schema: {type: object, required: [answer]}}}`
	cfg := batchConfig(t, input, hs.URL, "generate.params.response_format="+format,
		"generate.price={input_per_mtok: 2.5, cached_input_per_mtok: 1.25, output_per_mtok: 10}")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cost := func(rows []*pipeline.Rollout) (c float64, discarded int) {
		for _, r := range rows {
			prompt := float64(r.PromptTokens) + r.Metrics["discarded_prompt_tokens"]
			cached := r.Metrics["cached_prompt_tokens"]
			completion := float64(r.CompletionTokens) + r.Metrics["discarded_completion_tokens"]
			c += ((prompt-cached)*2.5 + cached*1.25 + completion*10) / 1e6
			discarded += int(r.Metrics["discarded_replies"])
		}
		return c, discarded
	}
	data := readBack(t, cfg.Output.Dir, schema.DataDir)
	all := append(data, readBack(t, cfg.Output.Dir, schema.ErrorsDir)...)
	want, discarded := cost(all)
	if !sum.Priced || want == 0 || discarded == 0 || math.Abs(sum.Cost-want) > 1e-12 {
		t.Fatalf("summary cost %v (priced %v), price × row tokens %v (%d replies thrown away)", sum.Cost, sum.Priced, want, discarded)
	}
	if sum.ProjectedCost != sum.Cost || !strings.Contains(sum.String(), "cost: "+metrics.FormatCost(want)) {
		t.Fatalf("summary:\n%s", sum)
	}
	var m struct {
		Cost struct {
			Total      float64 `json:"total"`
			PricedRows int     `json:"priced_rows"`
		} `json:"cost"`
	}
	b, err := os.ReadFile(filepath.Join(cfg.Output.Dir, schema.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(b, &m)
	// metrics.json's is every committed row's: data and errors.
	if math.Abs(m.Cost.Total-want) > 1e-12 || m.Cost.PricedRows != len(all) || len(data) == len(all) {
		t.Fatalf("metrics.json cost %+v, price × row tokens %v over %d rows (%d of them data)", m.Cost, want, len(all), len(data))
	}
}

func TestProjectedCost(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    runner.Snapshot
		want float64
		ok   bool
	}{
		{"no price", runner.Snapshot{Cost: 1, GroupsFinished: 10, TaskLimit: 100}, 0, false},
		{"nothing done", runner.Snapshot{Priced: true, TaskLimit: 100}, 0, false},
		{"target", runner.Snapshot{Priced: true, Cost: 2, GroupsFinished: 10, GroupsKept: 5, Target: 50}, 20, true},
		{"limit", runner.Snapshot{Priced: true, Cost: 2, GroupsFinished: 10, TaskLimit: 100}, 20, true},
		{"limit after a resume", runner.Snapshot{Priced: true, Cost: 2, GroupsFinished: 10, TaskLimit: 100, TasksResumed: 50}, 10, true},
		{"input read", runner.Snapshot{Priced: true, Cost: 2, GroupsFinished: 10, TasksRead: 25, InputFraction: 0.25}, 20, true},
		{"unknown", runner.Snapshot{Priced: true, Cost: 2, GroupsFinished: 10, TasksRead: 25}, 0, false},
	} {
		got, ok := tc.s.ProjectedCost()
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestFormatCost(t *testing.T) {
	for v, want := range map[float64]string{0: "0.0000", 12.345678: "12.3457", 1: "1.0000", 0.5: "0.5000", 0.0001234: "0.0001234", 0.000012346: "0.00001235"} {
		if got := metrics.FormatCost(v); got != want {
			t.Errorf("FormatCost(%v) = %s, want %s", v, got, want)
		}
	}
}
