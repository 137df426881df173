package report

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"regexp"
	"slices"

	"github.com/trajflow/trajflow/runner/metrics"
)

// echartsJS is Apache ECharts 5.6.0's dist/echarts.min.js from the npm
// package "echarts" (Apache-2.0; its licence header is kept in the file),
// the major version go-echarts v2 generates options for.
//
//go:embed assets/echarts.min.js
var echartsJS string

// EChartsVersion is the version of the embedded ECharts.
const EChartsVersion = "5.6.0"

// scriptEnd finds what would end or confuse an inline <script> element.
var scriptEnd = regexp.MustCompile(`(?i)</script|<!--`)

func init() {
	if scriptEnd.MatchString(echartsJS) {
		panic("report: the embedded echarts.min.js cannot be inlined in a <script> element")
	}
}

// page is what the template renders.
type page struct {
	Title   string
	Inputs  []string
	Files   int
	Created string
	// Metrics are every row's (the charts'); Stats the summary's, what
	// `trajflow stats` gives on the inputs without Options.Also.
	Metrics  *metrics.Metrics
	Stats    *metrics.Metrics
	Failures *failureSummary
	LastRun  *metrics.RunTokens
	Samples  []sampleView

	outcomes []metrics.TaskOutcome
	c        *collector
	served   *served // what trajflow serve left (Options.Served); nil: none
}

type envRow struct {
	Name                                string
	Rows, Scored, Correct, Errors, Kept int64
	MeanReward, Accuracy                float64
	MeanCompletion, MeanTurns           float64
	Status                              string
}

func (p *page) envRows() []envRow {
	var out []envRow
	for name, e := range p.c.envs {
		var st string
		for _, k := range sortedKeys(e.status) {
			if st != "" {
				st += ", "
			}
			st += fmt.Sprintf("%s %d", k, e.status[k])
		}
		out = append(out, envRow{
			Name: name, Rows: e.rows, Scored: e.scored, Correct: e.correct, Errors: e.errors, Kept: e.kept,
			MeanReward: ratioF(e.rewardSum, e.scored), Accuracy: ratio(e.correct, e.scored),
			MeanCompletion: ratioF(float64(e.completion), e.rows), MeanTurns: ratioF(float64(e.turns), e.rows),
			Status: st,
		})
	}
	slices.SortFunc(out, func(a, b envRow) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

func (p *page) render(w io.Writer) error {
	samples, err := json.Marshal(p.Samples) // escapes <, > and &: safe inside <script>
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if p.Samples == nil {
		samples = []byte("[]")
	}
	ids, err := json.Marshal(ChartIDs)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	data := struct {
		*page
		Charts       []chart
		Envs         []envRow
		EChartsJS    template.JS
		SamplesJSON  template.JS
		ChartIDsJSON template.JS
		Version      string
	}{p, p.charts(), p.envRows(), template.JS(echartsJS), template.JS(samples), template.JS(ids), EChartsVersion}
	if err := pageTemplate.Execute(w, data); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

var pageTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"f4":    func(v float64) string { return fmt.Sprintf("%.4f", v) },
	"cost":  metrics.FormatCost,
	"f1":    func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"deref": func(p *int64) int64 { return *p },
}).Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<script>
"use strict";
// Errors of the page, kept for the render check (#report-status).
window.reportErrors = [];
(function () {
  function record(msg) {
    window.reportErrors.push(String(msg));
    var el = document.getElementById("console-errors");
    if (el) { el.textContent = window.reportErrors.join("\n"); el.hidden = false; }
  }
  window.addEventListener("error", function (e) { record("error: " + (e.message || e)); });
  window.addEventListener("unhandledrejection", function (e) { record("unhandled rejection: " + e.reason); });
  var orig = console.error;
  console.error = function () { record("console.error: " + Array.prototype.join.call(arguments, " ")); return orig.apply(console, arguments); };
})();
</script>
<script>{{.EChartsJS}}</script>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #222; background: #f6f7f9; }
header { background: #1f2a44; color: #fff; padding: 16px 24px; }
header h1 { margin: 0 0 4px; font-size: 20px; }
header p { margin: 0; font-size: 13px; opacity: .8; }
main { padding: 16px 24px; max-width: 1400px; margin: 0 auto; }
section { background: #fff; border: 1px solid #e2e5ea; border-radius: 6px; margin: 0 0 16px; padding: 12px 16px; }
h2 { font-size: 16px; margin: 0 0 4px; }
.note { font-size: 12px; color: #666; margin: 0 0 8px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 16px; }
.grid section { margin: 0; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border-bottom: 1px solid #eee; padding: 3px 10px 3px 0; text-align: left; vertical-align: top; }
th { color: #555; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
#console-errors { color: #b00020; white-space: pre-wrap; }
#browser { display: grid; grid-template-columns: 300px 1fr; gap: 16px; }
#sample-list { max-height: 900px; overflow-y: auto; border-right: 1px solid #eee; }
#sample-list button { display: block; width: 100%; text-align: left; border: 0; border-bottom: 1px solid #f0f0f0; background: none; padding: 6px 8px; font-size: 12px; cursor: pointer; }
#sample-list button.on { background: #e8eefc; }
.kind { display: inline-block; min-width: 62px; font-weight: 600; }
.kind-correct { color: #1a7f37; } .kind-incorrect { color: #9a6700; } .kind-error { color: #b00020; } .kind-other { color: #555; }
.msg { border-left: 4px solid #ccc; margin: 6px 0; padding: 4px 8px; background: #fafafa; }
.msg-system { border-color: #8c8c8c; } .msg-user { border-color: #2f6fde; } .msg-assistant { border-color: #1a7f37; } .msg-tool { border-color: #c77c02; }
.msg .role { font-size: 11px; color: #555; font-weight: 600; text-transform: uppercase; }
.msg pre, .tool pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0; font-size: 12px; }
.tool { background: #fff6e5; border: 1px solid #f0d8a8; border-radius: 4px; padding: 4px 6px; margin: 4px 0; font-size: 12px; }
#tokens { font-family: ui-monospace, monospace; font-size: 11px; line-height: 1.9; }
#tokens span { padding: 1px 3px; margin: 1px; border-radius: 3px; display: inline-block; }
.tp { background: #e4e6eb; color: #444; } .t1 { background: #c9f0d3; color: #0b5323; } .t0 { background: #fde2c4; color: #7a4100; }
.legend span { padding: 1px 6px; border-radius: 3px; margin-right: 8px; font-size: 12px; }
#report-status { font-size: 12px; color: #666; }
</style>
</head>
<body>
<header>
<h1>{{.Title}}</h1>
<p>{{.Metrics.Rows}} rows from {{.Files}} Parquet file(s) in {{range $i, $p := .Inputs}}{{if $i}}, {{end}}{{$p}}{{end}} · made {{.Created}} · charts: Apache ECharts {{.Version}} (inlined) via go-echarts</p>
</header>
<main>
<pre id="console-errors" hidden></pre>
<section id="summary">
<h2>Summary</h2>
<table>
<tr><th>rows</th><td class="n">{{.Stats.Rows}}</td><th>status</th><td>{{range $k, $v := .Stats.Status}}{{$k}} {{$v}} &nbsp;{{end}}</td></tr>
<tr><th>scored rows</th><td class="n">{{.Stats.ScoredRows}}</td><th>reward</th><td>mean {{f4 .Stats.Reward.Mean}} · std {{f4 .Stats.Reward.Std}} · min {{.Stats.Reward.Min}} · max {{.Stats.Reward.Max}}</td></tr>
<tr><th>accuracy</th><td class="n">{{f4 .Stats.Correctness.Accuracy}}</td><th>correct</th><td>{{.Stats.Correctness.Correct}} of {{.Stats.ScoredRows}} scored rows{{if .Stats.Correctness.Metric}} (metric "{{.Stats.Correctness.Metric}}", else the reward, &gt; {{.Stats.Correctness.Threshold}}){{else}} (reward &gt; {{.Stats.Correctness.Threshold}}){{end}}</td></tr>
<tr><th>tasks</th><td class="n">{{.Stats.Tasks}}</td><th>complete</th><td>{{.Stats.TasksComplete}} ({{f4 .Stats.TaskCompletion}})</td></tr>
<tr><th>groups</th><td class="n">{{.Stats.Groups.Count}}</td><th>kept / dropped</th><td>{{.Stats.Groups.Kept}} / {{.Stats.Groups.Dropped}}{{range $k, $v := .Stats.Groups.DroppedBy}} · {{$k}} {{$v}}{{end}}</td></tr>
<tr><th>pass@k</th><td></td><td colspan="2">{{range .Stats.AtK}}k={{.K}}: {{f4 .PassAtK}} &nbsp; {{end}}</td></tr>
<tr><th>natural termination</th><td class="n">{{f4 .Stats.NaturalTerminationRate}}</td><th>truncated · max turns</th><td>{{f4 .Stats.TruncationRate}} · {{f4 .Stats.MaxTurnsRate}}</td></tr>
{{with .Stats.Cost}}<tr><th>cost</th><td class="n" id="cost">{{cost .Total}}</td><th>billed (generate.price)</th><td>{{.PricedRows}} priced rows ({{.Includes}}) · {{.Billed.PromptTokens}} prompt tokens ({{.Billed.CachedPromptTokens}} cached) · {{.Billed.CompletionTokens}} completion tokens</td></tr>
{{end}}{{if .Metrics.Groups.Dropped}}<tr><th>dropped groups</th><td class="n">{{.Metrics.Groups.Dropped}}</td><th>by reason</th><td>{{range $k, $v := .Metrics.Groups.DroppedBy}}{{$k}} {{$v}} &nbsp;{{end}}(in filtered/, not in the summary above)</td></tr>
{{end}}{{if .Metrics.Status.error}}<tr><th>error rows</th><td class="n">{{.Metrics.Status.error}}</td><th>by class</th><td>{{range $k, $v := .ErrorClasses}}{{$k}} {{$v}} &nbsp;{{end}}(in errors/, not in the summary above)</td></tr>
{{end}}{{with .LastRun}}<tr><th>last run's tokens</th><td class="n">{{.CompletionTokens}}</td><th>cancelled in flight</th><td>{{.CancelledRequests}} requests, about {{.CancelledTokensEstimate}} tokens of partial output (estimated){{if .ServerTokens}} · the servers counted {{deref .ServerTokens}} tokens generated{{end}}</td></tr>
{{end}}{{if .Failures}}<tr><th>failures.jsonl</th><td class="n">{{.Failures.N}}</td><th>by class</th><td>{{range .Failures.Classes}}{{.Class}} {{.N}} &nbsp;{{end}}(every rollout that failed, retried ones too)</td></tr>
{{end}}</table>
</section>
<div class="grid">
{{range .Charts}}<section class="chart-section" id="section-{{.ID}}">
<h2>{{.Title}}</h2>
<p class="note">{{.Note}}</p>
{{.Element}}
{{.Script}}
</section>
{{end}}</div>
<section id="envs" style="margin-top:16px">
<h2>Environments</h2>
<table>
<tr><th>env</th><th>rows</th><th>scored</th><th>correct</th><th>accuracy</th><th>mean reward</th><th>errors</th><th>kept rows</th><th>mean completion tokens</th><th>mean turns</th><th>status</th></tr>
{{range .Envs}}<tr><td>{{.Name}}</td><td class="n">{{.Rows}}</td><td class="n">{{.Scored}}</td><td class="n">{{.Correct}}</td><td class="n">{{f4 .Accuracy}}</td><td class="n">{{f4 .MeanReward}}</td><td class="n">{{.Errors}}</td><td class="n">{{.Kept}}</td><td class="n">{{f1 .MeanCompletion}}</td><td class="n">{{f1 .MeanTurns}}</td><td>{{.Status}}</td></tr>
{{end}}</table>
</section>
<section id="trajectories">
<h2>Trajectories</h2>
<p class="note">A sample of {{len .Samples}} rows, drawn at random within each kind (correct, incorrect, error, other) so that every kind present is shown. Token ids are shown as numbers (the report has no tokenizer).</p>
<div id="browser">
<div id="sample-list"></div>
<div id="sample-view"><p class="note">No trajectory in the sample.</p></div>
</div>
</section>
<p id="report-status" data-charts="0" data-rendered="0" data-errors="0">charts not rendered yet</p>
</main>
<script type="application/json" id="samples-data">{{.SamplesJSON}}</script>
<script>
"use strict";
(function () {
  var samples = JSON.parse(document.getElementById("samples-data").textContent);
  var list = document.getElementById("sample-list");
  var view = document.getElementById("sample-view");
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function row(t, k, v) { var tr = el("tr"); tr.appendChild(el("th", "", k)); tr.appendChild(el("td", "", v)); t.appendChild(tr); }
  function show(i) {
    var s = samples[i];
    Array.prototype.forEach.call(list.children, function (b, j) { b.className = j === i ? "on" : ""; });
    view.textContent = "";
    view.appendChild(el("h2", "", "task " + s.task_index + " · attempt " + s.attempt + " · rollout " + s.rollout_index));
    var t = el("table");
    row(t, "run", s.run_id); row(t, "traj_id", s.traj_id); row(t, "env / model", s.env + " / " + s.model);
    row(t, "status", s.status + (s.error_class ? " (" + s.error_class + ")" : "") + (s.kept ? ", kept" : ", not kept"));
    if (s.error) row(t, "error", s.error);
    row(t, "reward", s.reward + " (advantage " + s.advantage.toFixed(4) + ")");
    if (s.metrics) row(t, "metrics", Object.keys(s.metrics).sort().map(function (k) { return k + "=" + s.metrics[k]; }).join(", "));
    row(t, "finish reason", s.finish_reason); row(t, "turns", String(s.num_turns));
    row(t, "tokens", s.prompt_tokens + " prompt, " + s.completion_tokens + " completion");
    view.appendChild(t);
    var task = el("details"); task.appendChild(el("summary", "", "task (input row)")); task.appendChild(el("pre", "", s.task)); view.appendChild(task);
    view.appendChild(el("h2", "", "Messages (" + s.messages.length + ")"));
    s.messages.forEach(function (m) {
      var d = el("div", "msg msg-" + m.role);
      d.appendChild(el("div", "role", m.role + " · turn " + m.turn + (m.name ? " · " + m.name : "") + (m.tool_call_id ? " · answers " + m.tool_call_id : "")));
      if (m.content) d.appendChild(el("pre", "", m.content));
      (m.tool_calls || []).forEach(function (tc) {
        var c = el("div", "tool");
        c.appendChild(el("b", "", "tool call " + tc.name + (tc.id ? " (" + tc.id + ")" : "")));
        c.appendChild(el("pre", "", tc.arguments));
        d.appendChild(c);
      });
      view.appendChild(d);
    });
    view.appendChild(el("h2", "", "Tokens (" + (s.prompt_ids.length + s.response_ids.length + s.tokens_cut) + ")"));
    var lg = el("p", "legend");
    lg.appendChild(el("span", "tp", "prompt")); lg.appendChild(el("span", "t1", "loss_mask 1: generated")); lg.appendChild(el("span", "t0", "loss_mask 0: observation"));
    view.appendChild(lg);
    var tk = el("div"); tk.id = "tokens";
    s.prompt_ids.forEach(function (id) { tk.appendChild(el("span", "tp", String(id))); });
    s.response_ids.forEach(function (id, j) { tk.appendChild(el("span", s.loss_mask[j] ? "t1" : "t0", String(id))); });
    view.appendChild(tk);
    if (s.tokens_cut) view.appendChild(el("p", "note", s.tokens_cut + " more token ids not shown."));
  }
  samples.forEach(function (s, i) {
    var b = el("button");
    b.appendChild(el("span", "kind kind-" + s.kind, s.kind));
    b.appendChild(document.createTextNode(" task " + s.task_index + " #" + s.rollout_index + " · reward " + s.reward + " · " + s.status));
    b.addEventListener("click", function () { show(i); });
    list.appendChild(b);
  });
  if (samples.length) show(0);

  // The render check: every chart container holds an ECharts instance with
  // a drawn canvas of non-zero size; the result goes into #report-status.
  function check() {
    var ids = {{.ChartIDsJSON}};
    var rendered = 0;
    ids.forEach(function (id) {
      var d = document.getElementById(id);
      var inst = d && echarts.getInstanceByDom(d);
      var c = d && d.querySelector("canvas");
      if (inst && c && c.width > 0 && c.height > 0 && inst.getOption().series.length > 0) rendered++;
    });
    var st = document.getElementById("report-status");
    st.dataset.charts = ids.length;
    st.dataset.rendered = rendered;
    st.dataset.errors = window.reportErrors.length;
    st.textContent = "rendered " + rendered + " of " + ids.length + " charts; " + window.reportErrors.length + " page errors";
  }
  window.addEventListener("load", function () { requestAnimationFrame(function () { setTimeout(check, 0); }); });
  window.addEventListener("resize", function () {
    document.querySelectorAll(".chart-section [id^=chart_]").forEach(function (d) { var i = echarts.getInstanceByDom(d); if (i) i.resize(); });
  });
})();
</script>
</body>
</html>
`
