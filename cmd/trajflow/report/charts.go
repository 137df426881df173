package report

import (
	"cmp"
	"fmt"
	"html/template"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"
	"github.com/go-echarts/go-echarts/v2/render"

	"github.com/trajflow/trajflow/runner/metrics"
)

// chart is one rendered chart: go-echarts' element (the container div)
// and script (echarts.init and setOption with the data).
type chart struct {
	ID      string
	Title   string
	Note    string
	Element template.HTML
	Script  template.HTML
}

// ChartIDs are the ids of the charts' containers, in page order.
var ChartIDs = []string{
	"chart_reward", "chart_passk", "chart_solve", "chart_completion_tokens",
	"chart_prompt_tokens", "chart_turns", "chart_status", "chart_finish",
	"chart_errors", "chart_throughput", "chart_keep", "chart_envs",
}

type renderer interface{ RenderSnippet() render.ChartSnippet }

func snippet(id, title, note string, r renderer) chart {
	s := r.RenderSnippet()
	return chart{ID: id, Title: title, Note: note,
		Element: template.HTML(s.Element), Script: template.HTML(s.Script)} // go-echarts' own escaping
}

// global are the options every chart shares.
func global(id, xName, yName string) []charts.GlobalOpts {
	return []charts.GlobalOpts{
		charts.WithInitializationOpts(opts.Initialization{ChartID: id, Width: "100%", Height: "340px"}),
		charts.WithAnimation(false),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithXAxisOpts(opts.XAxis{Name: xName, NameLocation: "middle", NameGap: 28}),
		charts.WithYAxisOpts(opts.YAxis{Name: yName}),
		charts.WithGridOpts(opts.Grid{Left: "60", Right: "40", Bottom: "50", Top: "40"}),
	}
}

func bar(id, xName, yName string, labels []string, series ...barSeries) *charts.Bar {
	b := charts.NewBar()
	b.SetGlobalOptions(global(id, xName, yName)...)
	if len(series) > 1 {
		b.SetGlobalOptions(charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true)}))
	}
	b.SetXAxis(labels)
	for _, s := range series {
		data := make([]opts.BarData, len(s.values))
		for i, v := range s.values {
			data[i] = opts.BarData{Value: v}
		}
		b.AddSeries(s.name, data)
	}
	return b
}

type barSeries struct {
	name   string
	values []any
}

func line(id, xName, yName string, labels []string, series ...barSeries) *charts.Line {
	l := charts.NewLine()
	l.SetGlobalOptions(global(id, xName, yName)...)
	l.SetGlobalOptions(charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true)}))
	l.SetXAxis(labels)
	for _, s := range series {
		data := make([]opts.LineData, len(s.values))
		for i, v := range s.values {
			data[i] = opts.LineData{Value: v}
		}
		l.AddSeries(s.name, data)
	}
	return l
}

func pie(id string, c counter) *charts.Pie {
	p := charts.NewPie()
	p.SetGlobalOptions(
		charts.WithInitializationOpts(opts.Initialization{ChartID: id, Width: "100%", Height: "340px"}),
		charts.WithAnimation(false),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "item"}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Type: "scroll", Orient: "vertical", Left: "left"}),
	)
	var data []opts.PieData
	for _, k := range sortedKeys(c) {
		data = append(data, opts.PieData{Name: k, Value: c[k]})
	}
	p.AddSeries("rows", data).SetSeriesOptions(charts.WithLabelOpts(opts.Label{Show: opts.Bool(true), Formatter: "{b}: {c} ({d}%)"}))
	return p
}

// sortedKeys returns the keys of c by count, largest first, then by name.
func sortedKeys(c counter) []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(c[b], c[a]), cmp.Compare(a, b)) })
	return keys
}

// histSeries returns the labels and counts of a histogram: one bar per
// value when there are few distinct ones, else the bins.
func histSeries(h *hist) ([]string, []any) {
	var labels []string
	var values []any
	if h.exact != nil {
		vs := make([]float64, 0, len(h.exact))
		for v := range h.exact {
			vs = append(vs, v)
		}
		slices.Sort(vs)
		for _, v := range vs {
			labels = append(labels, strconv.FormatFloat(v, 'g', 6, 64))
			values = append(values, h.exact[v])
		}
		if len(labels) == 0 {
			return []string{"(no rows)"}, []any{0}
		}
		return labels, values
	}
	width := (h.hi - h.lo) / histBins
	for i, n := range h.bins {
		lo, hi := h.lo+float64(i)*width, h.lo+float64(i+1)*width
		if h.integer {
			labels = append(labels, fmt.Sprintf("%d–%d", int64(math.Ceil(lo)), int64(math.Ceil(hi))-1))
		} else {
			labels = append(labels, fmt.Sprintf("%.3g–%.3g", lo, hi))
		}
		values = append(values, n)
	}
	return labels, values
}

// solveBins are the per-task solve rate bins: exactly 0, tenths, exactly 1.
var solveBins = []string{"0%", "0–10%", "10–20%", "20–30%", "30–40%", "40–50%", "50–60%", "60–70%", "70–80%", "80–90%", "90–100%", "100%"}

func solveBin(n, c int) int {
	switch {
	case c <= 0:
		return 0
	case c >= n:
		return len(solveBins) - 1
	}
	return 1 + min(int(10*float64(c)/float64(n)), 9) // (0, 1) → 1..10
}

// maxKPoints bounds the points of the pass@k chart; above, k is sampled.
const maxKPoints = 256

func (p *page) charts() []chart {
	c := p.c
	m := p.Metrics
	var out []chart

	labels, values := histSeries(c.reward)
	out = append(out, snippet("chart_reward", "Reward distribution",
		fmt.Sprintf("Scored rows (status ok or filtered): %d. Mean %.4f, std %.4f.", m.Reward.N, m.Reward.Mean, m.Reward.Std),
		bar("chart_reward", "reward", "rows", labels, barSeries{"rows", values})))

	maxN := 0
	for _, o := range p.outcomes {
		maxN = max(maxN, o.N)
	}
	var ks []string
	var pass, hat []any
	step := max(1, (maxN+maxKPoints-1)/maxKPoints)
	for k := 1; k <= maxN; k += step {
		at := metrics.AtKOf(p.outcomes, k)
		ks = append(ks, strconv.Itoa(k))
		pass = append(pass, round4(at.PassAtK))
		hat = append(hat, round4(at.PassHatK))
	}
	if len(ks) == 0 {
		ks, pass, hat = []string{"1"}, []any{0}, []any{0}
	}
	out = append(out, snippet("chart_passk", "pass@k and pass^k",
		fmt.Sprintf("k = 1…%d; each value averages the tasks with at least k scored samples (docs/metrics.md). Correct: %s.", maxN, correctnessRule(m)),
		line("chart_passk", "k", "", ks, barSeries{"pass@k", pass}, barSeries{"pass^k", hat})))

	solve := make([]any, len(solveBins))
	for i := range solve {
		solve[i] = int64(0)
	}
	for _, o := range p.outcomes {
		b := solveBin(o.N, o.C)
		solve[b] = solve[b].(int64) + o.Tasks
	}
	out = append(out, snippet("chart_solve", "Per-task solve rate",
		fmt.Sprintf("Tasks by the share of their scored samples that are correct (%d tasks with a scored sample).", sumTasks(p.outcomes)),
		bar("chart_solve", "solve rate", "tasks", solveBins, barSeries{"tasks", solve})))

	labels, values = histSeries(c.complete)
	out = append(out, snippet("chart_completion_tokens", "Completion tokens per trajectory",
		fmt.Sprintf("Every row. Mean %.1f, p95 %d, max %d.", m.Tokens.Completion.Mean, m.Tokens.Completion.P95, m.Tokens.Completion.Max),
		bar("chart_completion_tokens", "completion tokens", "rows", labels, barSeries{"rows", values})))

	labels, values = histSeries(c.prompt)
	out = append(out, snippet("chart_prompt_tokens", "Prompt tokens per trajectory",
		fmt.Sprintf("Every row, over all turns. Mean %.1f, p95 %d, max %d. %s",
			m.Tokens.Prompt.Mean, m.Tokens.Prompt.P95, m.Tokens.Prompt.Max, envTokensNote(m)),
		bar("chart_prompt_tokens", "prompt tokens", "rows", labels, barSeries{"rows", values})))

	turns := slices.Sorted(maps.Keys(c.turns))
	labels, values = nil, nil
	for _, t := range turns {
		l := strconv.Itoa(t)
		if t == maxTurnBars {
			l += "+"
		}
		labels = append(labels, l)
		values = append(values, c.turns[t])
	}
	if len(labels) == 0 {
		labels, values = []string{"(no rows)"}, []any{0}
	}
	out = append(out, snippet("chart_turns", "Turns per trajectory",
		fmt.Sprintf("Every row. Mean %.2f, p95 %d, max %d.", m.Turns.Mean, m.Turns.P95, m.Turns.Max),
		bar("chart_turns", "turns", "rows", labels, barSeries{"rows", values})))

	out = append(out, snippet("chart_status", "Status", "Rows by status.", pie("chart_status", nonEmpty(c.status))))
	out = append(out, snippet("chart_finish", "Finish reasons", "Finish reason of each row's last generation.", pie("chart_finish", nonEmpty(c.finish))))

	labels, values = nil, nil
	for _, k := range sortedKeys(c.errors) {
		labels = append(labels, k)
		values = append(values, c.errors[k])
	}
	note := fmt.Sprintf("Rows with status error, by error_class: %d.", m.Status["error"])
	if len(labels) == 0 {
		labels, values = []string{"(no errors)"}, []any{0}
	}
	out = append(out, snippet("chart_errors", "Errors by class", note,
		bar("chart_errors", "error class", "rows", labels, barSeries{"rows", values})))

	out = append(out, p.timeCharts()...)
	out = append(out, p.envChart())
	out = append(out, p.serveCharts()...)
	return out
}

// commit is one point of the time charts: the files committed at one
// instant.
type commit struct {
	at                 time.Time
	rows, tokens       int64
	groups, kept       int64
	start              time.Time // the previous commit, or the run's estimated start
	cumGroups, cumKept int64
	cumRows, cumTokens int64
}

// commits groups the files by modification time (the commit time of a
// part file), oldest first.
func (p *page) commits() []commit {
	files := slices.Clone(p.c.files)
	slices.SortStableFunc(files, func(a, b *fileStat) int { return a.mtime.Compare(b.mtime) })
	var out []commit
	var start time.Time
	for _, f := range files {
		s := f.mtime.Add(-f.maxTotal)
		if start.IsZero() || s.Before(start) {
			start = s
		}
	}
	prev := start
	for _, f := range files {
		if n := len(out); n > 0 && f.mtime.Sub(out[n-1].at) < time.Millisecond {
			c := &out[n-1]
			c.rows += f.rows
			c.tokens += f.tokens
			c.groups += f.groups
			c.kept += f.kept
			continue
		}
		out = append(out, commit{at: f.mtime, start: prev, rows: f.rows, tokens: f.tokens, groups: f.groups, kept: f.kept})
		prev = f.mtime
	}
	var cg, ck, cr, ct int64
	for i := range out {
		cg += out[i].groups
		ck += out[i].kept
		cr += out[i].rows
		ct += out[i].tokens
		out[i].cumGroups, out[i].cumKept, out[i].cumRows, out[i].cumTokens = cg, ck, cr, ct
	}
	return out
}

func (p *page) timeCharts() []chart {
	cs := p.commits()
	var labels []string
	var rps, tps, keep, cumKeep []any
	var t0 time.Time
	if len(cs) > 0 {
		t0 = cs[0].start
	}
	for _, c := range cs {
		labels = append(labels, fmtElapsed(c.at.Sub(t0)))
		secs := max(c.at.Sub(c.start).Seconds(), 1e-3)
		rps = append(rps, round4(float64(c.rows)/secs))
		tps = append(tps, round4(float64(c.tokens)/secs))
		keep = append(keep, round4(ratio(c.kept, c.groups)))
		cumKeep = append(cumKeep, round4(ratio(c.cumKept, c.cumGroups)))
	}
	if len(labels) == 0 {
		labels, rps, tps, keep, cumKeep = []string{"0s"}, []any{0}, []any{0}, []any{0}, []any{0}
	}
	th := line("chart_throughput", "time since the run's estimated start (commit times of the part files)", "rollouts/s", labels,
		barSeries{"rollouts/s", rps})
	th.ExtendYAxis(opts.YAxis{Name: "tokens/s"})
	th.AddSeries("completion tokens/s", lineData(tps), charts.WithLineChartOpts(opts.LineChart{YAxisIndex: 1}))
	kr := line("chart_keep", "time since the run's estimated start (commit times of the part files)", "groups kept / groups", labels,
		barSeries{"per commit", keep}, barSeries{"cumulative", cumKeep})
	keepNote := "Groups kept by the keep rule over the groups in the files read."
	if !p.hasFiltered() {
		keepNote += " These inputs hold only kept groups (data/): the run wrote no filtered/ directory (output.filtered: true), so the rate is 1 by construction."
	}
	return []chart{
		snippet("chart_throughput", "Throughput over time",
			fmt.Sprintf("Rows and completion tokens committed per second, one point per commit (%d). A part file's modification time is its commit time; the first interval starts at the earliest commit minus the longest total_ms of its rows.", len(cs)), th),
		snippet("chart_keep", "Keep rate over time", keepNote, kr),
	}
}

func (p *page) hasFiltered() bool {
	return p.Metrics.Groups.Dropped > 0 || p.Metrics.Status["filtered"] > 0
}

func (p *page) envChart() chart {
	names := make([]string, 0, len(p.c.envs))
	for k := range p.c.envs {
		names = append(names, k)
	}
	slices.Sort(names)
	var reward, acc, keep, errs []any
	for _, n := range names {
		e := p.c.envs[n]
		reward = append(reward, round4(ratioF(e.rewardSum, e.scored)))
		acc = append(acc, round4(ratio(e.correct, e.scored)))
		keep = append(keep, round4(ratio(e.kept, e.rows)))
		errs = append(errs, round4(ratio(e.errors, e.rows)))
	}
	if len(names) == 0 {
		names, reward, acc, keep, errs = []string{"(no rows)"}, []any{0}, []any{0}, []any{0}, []any{0}
	}
	return snippet("chart_envs", "Per-environment breakdown",
		"Mean reward and accuracy over scored rows, kept and error shares over every row, by the env column. The table below has the counts.",
		bar("chart_envs", "environment", "", names,
			barSeries{"mean reward", reward}, barSeries{"accuracy", acc}, barSeries{"kept rows", keep}, barSeries{"error rows", errs}))
}

func lineData(vs []any) []opts.LineData {
	out := make([]opts.LineData, len(vs))
	for i, v := range vs {
		out[i] = opts.LineData{Value: v}
	}
	return out
}

func nonEmpty(c counter) counter {
	if len(c) == 0 {
		return counter{"(no rows)": 0}
	}
	return c
}

func sumTasks(os []metrics.TaskOutcome) int64 {
	var n int64
	for _, o := range os {
		n += o.Tasks
	}
	return n
}

func correctnessRule(m *metrics.Metrics) string {
	if m.Correctness.Metric == "" {
		return fmt.Sprintf("reward > %g", m.Correctness.Threshold)
	}
	return fmt.Sprintf("metric %q (else the reward) > %g", m.Correctness.Metric, m.Correctness.Threshold)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ratioF(a float64, b int64) float64 {
	if b == 0 {
		return 0
	}
	return a / float64(b)
}

func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }

func fmtElapsed(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// envTokensNote says what the rows' environment tokens (env_tokens) were,
// or that they are unknown for rows without token ids.
func envTokensNote(m *metrics.Metrics) string {
	var unknown string
	if n := m.TokenCountsUnknown; n > 0 {
		unknown = fmt.Sprintf(" (%d of %d rows unknown: no token ids)", n, m.Rows)
	}
	if m.Tokens.Env == nil {
		return "Environment tokens: unknown" + unknown + "."
	}
	return fmt.Sprintf("Environment tokens: mean %.1f, max %d%s.", m.Tokens.Env.Mean, m.Tokens.Env.Max, unknown)
}
