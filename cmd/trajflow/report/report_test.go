package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// hostile is message text that would break out of the page if it were not
// escaped.
const hostile = `</script><script src="https://evil.example/x.js"></script><img src=x onerror=alert(1)>`

// writeOutput writes an output directory of tasks groups: kept groups to
// data/, dropped ones (every fifth task) to filtered/, as a run with
// output.filtered does. Odd tasks run in env "code", even ones in "math";
// task 3's messages hold hostile text. It returns every rollout written.
func writeOutput(t testing.TB, dir string, tasks int) []*pipeline.Rollout {
	t.Helper()
	ctx := context.Background()
	open := func(sub string) (*pqsink.Writer, *collate.Collator) {
		w, err := pqsink.New(filepath.Join(dir, sub), pqsink.Options{FileRows: 24})
		if err != nil {
			t.Fatal(err)
		}
		return w, collate.New(memory.DefaultAllocator, 16)
	}
	data, dc := open("data")
	filtered, fc := open("filtered")
	defer dc.Release()
	defer fc.Release()
	write := func(w *pqsink.Writer, rec arrow.Record) {
		if rec == nil {
			return
		}
		defer rec.Release()
		if err := w.Write(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	var all []*pipeline.Rollout
	for ti := range int64(tasks) {
		g := pipelinetest.Group(ti, 4+int(ti%3)*2, 400) // n = 4, 6, 8
		g.Key.Attempt = g.Rollouts[0].Attempt
		for _, r := range g.Rollouts {
			if ti%2 == 1 {
				r.Env = "code"
			}
			if ti == 3 {
				r.Messages[1].Content = hostile
			}
		}
		all = append(all, g.Rollouts...)
		if g.Rollouts[0].Kept {
			write(data, dc.Add(g))
		} else {
			write(filtered, fc.Add(g))
		}
	}
	write(data, dc.Flush())
	write(filtered, fc.Flush())
	for _, w := range []*pqsink.Writer{data, filtered} {
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return all
}

func buildReport(t testing.TB, paths []string, opts Options) string {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(context.Background(), paths, &buf, opts); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// externalRef matches a reference the browser would fetch: a src or href
// to another host, a CSS import or url() of one.
var externalRef = regexp.MustCompile(`(?i)(\b(src|href)\s*=\s*["']?\s*(https?:)?//)|(@import)|(url\(\s*["']?(https?:)?//)`)

func TestReportHasEveryChartAndNoExternalReference(t *testing.T) {
	dir := t.TempDir()
	rows := writeOutput(t, dir, 20)
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	html := buildReport(t, Inputs(dir), Options{Allocator: alloc, BatchRows: 7})
	alloc.AssertSize(t, 0)

	for _, id := range ChartIDs {
		for _, want := range []string{
			fmt.Sprintf(`id="%s"`, id),                               // the container
			fmt.Sprintf(`let goecharts_%s = echarts.init(`, id),      // go-echarts' init
			fmt.Sprintf(`goecharts_%s.setOption(option_%s)`, id, id), // and its data
		} {
			if !strings.Contains(html, want) {
				t.Errorf("chart %s: no %q", id, want)
			}
		}
	}
	if m := externalRef.FindString(html); m != "" {
		t.Errorf("external reference %q", m)
	}
	if strings.Contains(html, hostile) || strings.Contains(html, "evil.example/x.js\"></script>") {
		t.Error("message text reached the page unescaped")
	}
	if !strings.Contains(html, `echarts.min.js`) && !strings.Contains(html, "Apache Software Foundation") {
		t.Error("the ECharts library is not inlined")
	}
	if n := strings.Count(html, "<script src"); n != 0 {
		t.Errorf("%d scripts loaded from elsewhere", n)
	}

	// The data behind the charts: pass@k for k = 1…6 (the most scored
	// samples of a task: 8 less 2 errors),
	// both environments, the error class, the dropped groups' reason.
	for _, want := range []string{
		`"data":["1","2","3","4","5","6"]}`,
		`"name":"pass@k"`, `"name":"pass^k"`,
		`"data":["code","math"]`,
		`"data":["server"]`,
		`"name":"stop"`,
		"zero_std",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %s", want)
		}
	}

	// The sample: at most DefaultSamples rows, every kind present, with
	// messages, tool calls and the token view.
	samples := pageSamples(t, html)
	if len(samples) == 0 || len(samples) > DefaultSamples {
		t.Fatalf("%d samples, want 1..%d", len(samples), DefaultSamples)
	}
	kinds := map[string]bool{}
	var tools, masked int
	for _, s := range samples {
		kinds[s.Kind] = true
		for _, m := range s.Messages {
			tools += len(m.ToolCalls)
		}
		if len(s.PromptIDs) == 0 || len(s.ResponseIDs) != len(s.LossMask) {
			t.Errorf("sample %s: token view %d prompt, %d response, %d mask", s.TrajID, len(s.PromptIDs), len(s.ResponseIDs), len(s.LossMask))
		}
		for _, v := range s.LossMask {
			if v == 0 {
				masked++
				break
			}
		}
	}
	for _, k := range []string{"correct", "incorrect", "error"} {
		if !kinds[k] {
			t.Errorf("no %s sample among %d", k, len(samples))
		}
	}
	if tools == 0 || masked == 0 {
		t.Errorf("samples show %d tool calls and %d trajectories with observation tokens", tools, masked)
	}
	_ = rows
}

// pageSamples returns the sample embedded in a report.
func pageSamples(t testing.TB, html string) []sampleView {
	t.Helper()
	const open = `<script type="application/json" id="samples-data">`
	i := strings.Index(html, open)
	j := strings.Index(html[i:], "</script>")
	if i < 0 || j < 0 {
		t.Fatal("no samples in the page")
	}
	var out []sampleView
	if err := json.Unmarshal([]byte(html[i+len(open):i+j]), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The charts' numbers are those of the stats pass: per-task solve rates
// and pass@k at every k come from the same task outcomes.
func TestReportNumbers(t *testing.T) {
	dir := t.TempDir()
	rows := writeOutput(t, dir, 12)
	agg := metrics.New()
	for _, r := range rows {
		agg.Add(r)
	}
	html := buildReport(t, Inputs(dir), Options{Samples: -1})
	outcomes := agg.TaskOutcomes()
	if maxN := outcomes[len(outcomes)-1].N; maxN != 6 {
		t.Fatalf("fixture: at most %d scored samples a task, want 6", maxN)
	}
	for k := 1; k <= 6; k++ {
		want := metrics.AtKOf(outcomes, k).PassAtK
		if !strings.Contains(html, fmt.Sprintf("%v", round4(want))) {
			t.Errorf("pass@%d = %v not in the page", k, round4(want))
		}
	}
	if got := pageSamples(t, html); len(got) != 0 {
		t.Errorf("Samples -1: %d samples", len(got))
	}
	if !strings.Contains(html, fmt.Sprintf("<th>rows</th><td class=\"n\">%d</td>", len(rows))) {
		t.Error("summary does not count every row of data/ and filtered/")
	}
}

func TestSampleLimits(t *testing.T) {
	dir := t.TempDir()
	writeOutput(t, dir, 10)
	tests := []struct {
		samples, maxTokens int
	}{
		{1, 4096}, {3, 5}, {40, 12},
	}
	for _, tt := range tests {
		html := buildReport(t, []string{dir}, Options{Samples: tt.samples, MaxTokens: tt.maxTokens})
		got := pageSamples(t, html)
		if len(got) == 0 || len(got) > tt.samples {
			t.Errorf("Samples %d: got %d", tt.samples, len(got))
		}
		for _, s := range got {
			if n := len(s.PromptIDs) + len(s.ResponseIDs); n > tt.maxTokens {
				t.Errorf("MaxTokens %d: %d ids shown", tt.maxTokens, n)
			}
			if len(s.PromptIDs)+len(s.ResponseIDs)+s.TokensCut < 18 {
				t.Errorf("MaxTokens %d: %d shown + %d cut: ids lost", tt.maxTokens, len(s.PromptIDs)+len(s.ResponseIDs), s.TokensCut)
			}
		}
	}
}

func TestInputs(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		setup func()
		want  []string
	}{
		{"no filtered/", func() {}, []string{dir}},
		{"empty filtered/", func() { os.MkdirAll(filepath.Join(dir, schema.FilteredDir), 0o755) }, []string{dir}},
		{"filtered/ with parts", func() {
			os.WriteFile(filepath.Join(dir, schema.FilteredDir, "part-00000.parquet"), nil, 0o644)
		}, []string{dir, filepath.Join(dir, schema.FilteredDir)}},
	}
	for _, tt := range tests {
		tt.setup()
		if got := Inputs(dir); strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s: Inputs = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestWriteFileErrors(t *testing.T) {
	dir := t.TempDir()
	notParquet := filepath.Join(dir, "x.parquet")
	os.WriteFile(notParquet, []byte("not parquet"), 0o644)
	tests := []struct {
		name  string
		paths []string
		want  string
	}{
		{"missing", []string{filepath.Join(dir, "absent")}, "absent"},
		{"not parquet", []string{notParquet}, "x.parquet"},
		{"none", nil, "no input"},
	}
	for _, tt := range tests {
		out := filepath.Join(dir, "r.html")
		err := WriteFile(context.Background(), tt.paths, out, Options{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want it to name %q", tt.name, err, tt.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: a report was written", tt.name)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, ".r.html.*")); len(left) > 0 {
			t.Errorf("%s: temporary files left: %v", tt.name, left)
		}
	}
}

func TestHist(t *testing.T) {
	tests := []struct {
		name   string
		lo, hi float64
		values []float64
		labels int
	}{
		{"two values: two bars", 0, 1, []float64{0, 1, 1, 0, 1}, 2},
		{"many values: bins", 0, 100, seqFloat(100), histBins},
		{"one value", 5, 5, []float64{5, 5}, 1},
	}
	for _, tt := range tests {
		h := newHist(tt.lo, tt.hi, false)
		for _, v := range tt.values {
			h.add(v)
		}
		labels, values := histSeries(h)
		var sum int64
		for _, v := range values {
			sum += v.(int64)
		}
		if len(labels) != tt.labels || sum != int64(len(tt.values)) {
			t.Errorf("%s: %d labels (want %d), %d counted (want %d)", tt.name, len(labels), tt.labels, sum, len(tt.values))
		}
	}
}

func seqFloat(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i)
	}
	return out
}

func TestSolveBin(t *testing.T) {
	tests := []struct{ n, c, bin int }{
		{4, 0, 0}, {4, 4, 11}, {4, 1, 3}, {4, 2, 6}, {100, 1, 1}, {100, 99, 10}, {3, 2, 7},
	}
	for _, tt := range tests {
		if got := solveBin(tt.n, tt.c); got != tt.bin {
			t.Errorf("solveBin(%d, %d) = %d (%s), want %d (%s)", tt.n, tt.c, got, solveBins[got], tt.bin, solveBins[tt.bin])
		}
	}
}

func TestCommitsOverTime(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 10, 0, time.UTC)
	p := &page{c: &collector{files: []*fileStat{
		{mtime: t0.Add(20 * time.Second), rows: 40, groups: 10, kept: 5},
		{mtime: t0, rows: 20, groups: 5, kept: 5, maxTotal: 10 * time.Second},
		{mtime: t0.Add(20 * time.Second), rows: 4, groups: 1, kept: 0}, // same commit instant
	}}}
	cs := p.commits()
	if len(cs) != 2 {
		t.Fatalf("%d commits, want 2: %+v", len(cs), cs)
	}
	if got := cs[0].at.Sub(cs[0].start); got != 10*time.Second {
		t.Errorf("first interval %v, want 10s (its longest rollout)", got)
	}
	if cs[1].rows != 44 || cs[1].groups != 11 || cs[1].cumGroups != 16 || cs[1].cumKept != 10 {
		t.Errorf("second commit %+v", cs[1])
	}
}
