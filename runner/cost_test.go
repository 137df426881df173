package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/cmd/trajflow/report"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/runner/analyze"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
)

// One run, one cost: with error rows (invalid_output rows whose thrown-away
// replies were paid, rate_limited rows), the summary, the progress line's
// snapshot, metrics.json, `trajflow stats` and the report give the same
// total, and each says what it includes.
func TestOneCostEverywhere(t *testing.T) {
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
		var i int
		fmt.Sscanf(prompt, "q%d", &i)
		mu.Lock()
		tries[prompt]++
		mu.Unlock()
		if i%7 == 3 {
			http.Error(w, `{"error":{"message":"slow down"}}`, http.StatusTooManyRequests)
			return
		}
		content := `{"answer": 7}`
		if i%3 == 0 {
			content = `{"answer": "seven"}` // never valid: an invalid_output row
		}
		b, _ := json.Marshal(content)
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%s},"text":%s,"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
			b, b, 100+i, 10+i%7, (i%2)*64)
	}))
	defer hs.Close()
	input, _ := writeBatchInput(t, t.TempDir(), 60)
	format := `{type: json_schema, json_schema: {name: a, schema: {type: object, required: [answer], properties: {answer: {type: integer}}}}}`
	cfg := batchConfig(t, input, hs.URL, "generate.params.response_format="+format, "run.max_error_rate=1",
		"generate.price={input_per_mtok: 2.5, cached_input_per_mtok: 1.25, output_per_mtok: 10}")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.ErrorClasses["invalid_output"] == 0 || sum.ErrorClasses["rate_limited"] == 0 {
		t.Fatalf("error classes %v: the test needs invalid_output and rate_limited rows", sum.ErrorClasses)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12 }
	figures := map[string]float64{"summary": sum.Cost, "projected": sum.ProjectedCost}

	var m struct {
		Cost struct {
			Total float64 `json:"total"`
			Dirs  map[string]struct {
				Total      float64 `json:"total"`
				PricedRows int     `json:"priced_rows"`
			} `json:"dirs"`
		} `json:"cost"`
		Envs map[string]struct {
			Cost *struct {
				Total float64 `json:"total"`
			} `json:"cost"`
		} `json:"envs"`
	}
	b, err := os.ReadFile(filepath.Join(cfg.Output.Dir, schema.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	figures["metrics.json"] = m.Cost.Total
	if m.Cost.Dirs["errors"].PricedRows == 0 || m.Cost.Dirs["errors"].Total == 0 || !near(m.Cost.Dirs["data"].Total+m.Cost.Dirs["errors"].Total, m.Cost.Total) {
		t.Fatalf("metrics.json's cost does not split into data and errors rows: %+v", m.Cost)
	}
	// The environments' costs add up to the total, the error rows'
	// included.
	envSum := 0.0
	for _, e := range m.Envs {
		if e.Cost != nil {
			envSum += e.Cost.Total
		}
	}
	if len(m.Envs) == 0 || !near(envSum, m.Cost.Total) {
		t.Fatalf("metrics.json's environments cost %v in all, its total %v (%d environments)", envSum, m.Cost.Total, len(m.Envs))
	}

	var text bytes.Buffer
	st, err := analyze.Stats(context.Background(), []string{cfg.Output.Dir}, &text, analyze.StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	figures["stats"] = st.Cost.Total
	if !strings.Contains(text.String(), fmt.Sprintf("data %d, errors %d rows", m.Cost.Dirs["data"].PricedRows, m.Cost.Dirs["errors"].PricedRows)) {
		t.Fatalf("trajflow stats does not say what its cost includes:\n%s", text.String())
	}

	var html bytes.Buffer
	if err := report.Write(context.Background(), []string{cfg.Output.Dir}, &html, report.Options{}); err != nil {
		t.Fatal(err)
	}
	// The report shows 4 significant digits; its sum may round the other
	// way at a half.
	cell := regexp.MustCompile(`id="cost">([^<]+)<`).FindStringSubmatch(html.String())
	if cell == nil {
		t.Fatal("the report has no cost cell")
	}
	shown, err := strconv.ParseFloat(cell[1], 64)
	if err != nil || math.Abs(shown-sum.Cost) > 0.51e-5 {
		t.Errorf("report cost cell %q, want %s", cell[1], metrics.FormatCost(sum.Cost))
	}
	if !strings.Contains(html.String(), "errors "+fmt.Sprint(m.Cost.Dirs["errors"].PricedRows)+" rows") {
		t.Fatal("the report does not say what its cost includes")
	}
	if !strings.Contains(sum.String(), "cost: "+metrics.FormatCost(sum.Cost)+" (generate.price; every request of this run") {
		t.Fatalf("the summary does not say what its cost includes:\n%s", sum)
	}
	for name, v := range figures {
		if !near(v, sum.Cost) {
			t.Errorf("%s cost %v, summary %v (all: %v)", name, v, sum.Cost, figures)
		}
	}
}
