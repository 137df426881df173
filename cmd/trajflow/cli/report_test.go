package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/cmd/trajflow/cli"
	"github.com/trajflow/trajflow/cmd/trajflow/report"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
)

// trajflow report on a run's output (the quick start on the simulator,
// with dynamic sampling so that filtered/ exists) writes one HTML file
// holding every chart and no reference to another host.
func TestReport(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	t.Chdir(root)
	out := t.TempDir()
	main := func(code int, args ...string) (string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if got := cli.Main(args, &stdout, &stderr); got != code {
			t.Fatalf("%v: exit %d, want %d\n%s%s", args, got, code, &stdout, &stderr)
		}
		return stdout.String(), stderr.String()
	}
	main(cli.ExitOK, "run", "examples/quickstart/config.yaml", "-q", "--set", "output.dir="+out,
		"--set", "source.limit=40", "--set", "groups.keep=nonzero_std", "--set", "output.filtered=true")
	if files, _ := filepath.Glob(filepath.Join(out, "filtered", "*.parquet")); len(files) == 0 {
		t.Fatal("fixture: the run dropped no group")
	}

	stdout, _ := main(cli.ExitOK, "report", out)
	def := filepath.Join(out, schema.ReportFile)
	if !strings.Contains(stdout, def) {
		t.Errorf("stdout %q does not name %s", stdout, def)
	}
	other := filepath.Join(t.TempDir(), "r.html")
	main(cli.ExitOK, "report", "--samples", "3", out, "-o", other)

	external := regexp.MustCompile(`(?i)\b(src|href)\s*=\s*["']?\s*(https?:)?//`)
	for _, path := range []string{def, other} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		html := string(b)
		for _, id := range report.ChartIDs {
			if !strings.Contains(html, `id="`+id+`"`) || !strings.Contains(html, "goecharts_"+id+".setOption(") {
				t.Errorf("%s: chart %s missing", path, id)
			}
		}
		if m := external.FindString(html); m != "" {
			t.Errorf("%s: external reference %q", path, m)
		}
		// The dropped groups of filtered/ are counted: some groups dropped.
		if !strings.Contains(html, "zero_std") {
			t.Errorf("%s: filtered/ not read (no zero_std drop reason)", path)
		}
	}

	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"report"}, cli.ExitUsage, "Usage: trajflow report"},
		{[]string{"report", out, out}, cli.ExitUsage, "Usage: trajflow report"},
		{[]string{"report", "--bogus", out}, cli.ExitUsage, "unknown flag -bogus"},
		{[]string{"report", "--help"}, cli.ExitOK, "self-contained HTML"},
		{[]string{"report", filepath.Join(out, "absent")}, cli.ExitFailed, "absent"},
		{[]string{"help"}, cli.ExitOK, "trajflow report OUTPUT"},
	}
	for _, tt := range tests {
		stdout, stderr := main(tt.code, tt.args...)
		if !strings.Contains(stdout+stderr, tt.want) {
			t.Errorf("%v: output lacks %q:\n%s%s", tt.args, tt.want, stdout, stderr)
		}
	}
}

// The report's summary gives the numbers `trajflow stats` gives on the
// same output, and shows the error rows of errors/ and the failures log.
func TestReportNumbersEqualStats(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	t.Chdir(root)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	// A context of 323 tokens refuses the longer first prompts: error
	// rows beside kept and dropped groups.
	if code := cli.Main([]string{"run", "examples/quickstart/config.yaml", "-q", "--set", "output.dir=" + out,
		"--set", "source.limit=40", "--set", "generate.sim.max_model_len=323", "--set", "run.max_error_rate=1",
		"--set", "groups.keep=nonzero_std", "--set", "output.filtered=true"}, &stdout, &stderr); code != cli.ExitOK {
		t.Fatalf("run: exit %d\n%s%s", code, &stdout, &stderr)
	}
	stdout.Reset()
	if code := cli.Main([]string{"stats", "--json", out}, &stdout, &stderr); code != cli.ExitOK {
		t.Fatalf("stats: exit %d\n%s", code, &stderr)
	}
	var m metrics.Metrics
	if err := json.Unmarshal(stdout.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if code := cli.Main([]string{"report", out}, &stdout, &stderr); code != cli.ExitOK {
		t.Fatalf("report: exit %d\n%s", code, &stderr)
	}
	b, err := os.ReadFile(filepath.Join(out, schema.ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, want := range []string{
		fmt.Sprintf(`<th>rows</th><td class="n">%d</td>`, m.Rows),
		fmt.Sprintf(`<th>scored rows</th><td class="n">%d</td><th>reward</th><td>mean %.4f · std %.4f`, m.ScoredRows, m.Reward.Mean, m.Reward.Std),
		fmt.Sprintf(`<th>accuracy</th><td class="n">%.4f</td>`, m.Correctness.Accuracy),
		fmt.Sprintf(`<th>tasks</th><td class="n">%d</td>`, m.Tasks),
		fmt.Sprintf(`<th>groups</th><td class="n">%d</td>`, m.Groups.Count),
		`<th>error rows</th><td class="n">40</td><th>by class</th><td>context_length 40`,
		`<th>failures.jsonl</th><td class="n">40</td><th>by class</th><td>context_length 40`,
		`<th>dropped groups</th>`,
		// metrics.json's last_run figures.
		`<th>last run's tokens</th>`,
	} {
		if !strings.Contains(html, want) {
			i := strings.Index(html, `<section id="summary">`)
			t.Errorf("the report lacks %q; its summary:\n%s", want, html[i:i+min(3000, len(html)-i)])
		}
	}
}
