package report

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/trajflow/trajflow/schema"
)

// chromium returns the headless browser to load reports in: Debian's
// chromium package (or chromium-browser, google-chrome). Without one the
// test is skipped, except under CI=true, where .ci/run installs it and its
// absence is a failure. -short skips it outside CI.
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("-short: the headless Chromium render check (about 15 s) is skipped")
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true and no chromium: .ci/run installs Debian's chromium package")
	}
	t.Skip("chromium not installed (apt-get install chromium); the report's render check is skipped")
	return ""
}

// dumpDOM loads the HTML file at path in headless Chromium, with every
// network fetch disabled, and returns the DOM after the page's scripts ran.
func dumpDOM(t *testing.T, browser, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--user-data-dir="+t.TempDir(),
		// Refuse every host: a page that fetched anything would fail.
		"--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
		"--window-size=1400,1000", "--virtual-time-budget=10000",
		"--dump-dom", (&url.URL{Scheme: "file", Path: abs}).String())
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\nstderr (end):\n%s", browser, err, stderr.String())
	}
	return string(out)
}

// limitedBuffer keeps the last 8 KiB written.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.b = append(l.b, p...)
	if len(l.b) > 8<<10 {
		l.b = l.b[len(l.b)-8<<10:]
	}
	return len(p), nil
}
func (l *limitedBuffer) String() string { return string(l.b) }

var statusRE = regexp.MustCompile(`<p id="report-status" data-charts="(\d+)" data-rendered="(\d+)" data-errors="(\d+)">([^<]*)`)
var errorsRE = regexp.MustCompile(`(?s)<pre id="console-errors"[^>]*>(.*?)</pre>`)

// The report renders in a real browser: every chart's container holds a
// drawn ECharts canvas, the page raised no error and logged none
// (window.onerror, unhandled rejections and console.error are recorded
// into the DOM by the page itself), and the trajectory browser is filled.
func TestReportRendersInChromium(t *testing.T) {
	browser := chromium(t)
	dir := t.TempDir()
	writeOutput(t, dir, 20)
	path := filepath.Join(dir, schema.ReportFile)
	if err := WriteFile(context.Background(), Inputs(dir), path, Options{}); err != nil {
		t.Fatal(err)
	}
	dom := dumpDOM(t, browser, path)

	m := statusRE.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no render status in the DOM: the page's scripts did not run\n%.2000s", dom)
	}
	charts, _ := strconv.Atoi(m[1])
	rendered, _ := strconv.Atoi(m[2])
	errs, _ := strconv.Atoi(m[3])
	if charts != len(ChartIDs) || rendered != charts {
		t.Errorf("rendered %d of %d charts (want %d): %s", rendered, charts, len(ChartIDs), m[4])
	}
	if e := errorsRE.FindStringSubmatch(dom); errs != 0 || (e != nil && e[1] != "") {
		t.Errorf("%d page errors: %s", errs, e)
	}
	canvases := regexp.MustCompile(`<canvas`).FindAllStringIndex(dom, -1)
	if len(canvases) < len(ChartIDs) {
		t.Errorf("%d canvas elements for %d charts", len(canvases), len(ChartIDs))
	}
	for _, want := range []string{`class="t1"`, `class="t0"`, `class="tp"`, `class="msg msg-assistant"`} {
		if !regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(dom) {
			t.Errorf("trajectory view lacks %s", want)
		}
	}
}
