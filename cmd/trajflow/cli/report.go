package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/trajflow/trajflow/cmd/trajflow/report"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/storage"
)

const reportUsage = `Usage: trajflow report OUTPUT [-o report.html] [--samples N] [--metric NAME] [--threshold X] [--use-reward]

Writes one self-contained HTML file (no network needed to open it) with
charts of a run's committed output: reward distribution, pass@k for every k,
per-task solve rate, token and turn lengths, status, finish reasons, errors
by class, throughput and keep rate over time, a per-environment breakdown,
and a browsable sample of trajectories. OUTPUT is an output directory (its
data/part-*.parquet, and filtered/ when the run wrote it), a sharded run's
root (every shard's; a line on stderr says which shards are missing or
incomplete), or a Parquet file, or an s3:// URL of any of them.
The default -o is OUTPUT/report.html (report.html beside a file; in the
bucket for an s3:// OUTPUT).
`

func reportCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("o", "", "the HTML file to write (default OUTPUT/report.html)")
	samples := fs.Int("samples", report.DefaultSamples, "most trajectories shown (0: none)")
	metric := fs.String("metric", "acc", "metric that says whether a sample is correct")
	threshold := fs.Float64("threshold", 0, "a sample is correct when the metric (or reward) is above this")
	useReward := fs.Bool("use-reward", false, "judge correctness by the reward, not the metric")
	paths, code := parse(fs, args, reportUsage, stdout, stderr)
	if code >= 0 {
		return code
	}
	if len(paths) != 1 {
		fmt.Fprint(stderr, reportUsage)
		return ExitUsage
	}
	output := paths[0]
	// An s3:// OUTPUT is read from a download; the report goes beside it
	// in the bucket unless -o names a local file.
	var f fetched
	defer f.close()
	remoteDest := ""
	if storage.IsURL(output) {
		local, err := f.localPaths(ctx, paths)
		if err != nil {
			fmt.Fprintln(stderr, "trajflow report:", err)
			return storeCode(err)
		}
		if *out == "" {
			remoteDest = storage.Join(output, schema.ReportFile)
			if strings.HasSuffix(output, ".parquet") {
				remoteDest = storage.Join(output, "..", schema.ReportFile)
			}
		}
		output = local[0]
	}
	if storage.IsURL(*out) {
		remoteDest = *out
	}
	if remoteDest != "" {
		*out = filepath.Join(os.TempDir(), fmt.Sprintf("trajflow-report-%d.html", os.Getpid()))
		defer func() { _ = os.Remove(*out) }() // best effort: a temporary file, not output
	}
	st, err := os.Stat(output)
	if err != nil {
		fmt.Fprintln(stderr, "trajflow report:", err)
		return ExitFailed
	}
	dest := *out
	if dest == "" {
		dest = filepath.Join(output, schema.ReportFile)
		if !st.IsDir() {
			dest = filepath.Join(filepath.Dir(output), schema.ReportFile)
		}
	}
	n := *samples
	if n == 0 {
		n = -1 // report.Options: 0 is the default, negative none
	}
	inputs := []string{output}
	var also, failures []string
	runMetrics, served := "", ""
	if st.IsDir() {
		runMetrics, served = filepath.Join(output, schema.MetricsFile), output
		also, failures = report.Also(output), report.FailureLogs(output)
		if _, err := reportShards("report", []string{output}, &namedWriter{stderr, &f}); err != nil {
			fmt.Fprintln(stderr, "trajflow report:", f.names(err.Error()))
			return ExitFailed
		}
	}
	err = report.WriteFile(ctx, inputs, dest, report.Options{
		Samples:     n,
		Also:        also,
		Failures:    failures,
		RunMetrics:  runMetrics,
		Served:      served,
		Correctness: metrics.Options{Metric: *metric, Threshold: *threshold, UseReward: *useReward},
	})
	if err != nil {
		fmt.Fprintln(stderr, "trajflow report:", f.names(err.Error()))
		return ExitFailed
	}
	if remoteDest != "" {
		if err := f.upload(ctx, dest, remoteDest); err != nil {
			fmt.Fprintln(stderr, "trajflow report:", err)
			return storeCode(err)
		}
		dest = remoteDest
	}
	fmt.Fprintln(stdout, "wrote", dest)
	return ExitOK
}
