package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/trajflow/trajflow/internal/analyze"
	"github.com/trajflow/trajflow/internal/metrics"
	"github.com/trajflow/trajflow/storage"
)

const statsUsage = `Usage: trajflow stats [--json] [--metric NAME] [--threshold X] [--use-reward] DIR|FILE...

Computes a run's metrics (reward, pass@k, pass^k, mean@k, completion, token
and turn statistics) from its Parquet files alone. A DIR is an output
directory (its data/part-*.parquet) or a directory of Parquet files; an
s3://bucket/prefix stands for the output directory there (endpoint and
credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
`

func statsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print JSON (the shape of metrics.json)")
	metric := fs.String("metric", "acc", "metric that says whether a sample is correct")
	threshold := fs.Float64("threshold", 0, "a sample is correct when the metric (or reward) is above this")
	useReward := fs.Bool("use-reward", false, "judge correctness by the reward, not the metric")
	paths, code := parse(fs, args, statsUsage, stdout, stderr)
	if code >= 0 {
		return code
	}
	if len(paths) == 0 {
		fmt.Fprint(stderr, statsUsage)
		return ExitUsage
	}
	var f fetched
	defer f.close()
	paths, err := f.localPaths(ctx, paths)
	if err != nil {
		fmt.Fprintln(stderr, "trajflow stats:", err)
		return storeCode(err)
	}
	_, err = analyze.Stats(ctx, paths, stdout, analyze.StatsOptions{
		JSON:        *asJSON,
		Correctness: metrics.Options{Metric: *metric, Threshold: *threshold, UseReward: *useReward},
	})
	if err != nil {
		fmt.Fprintln(stderr, "trajflow stats:", f.names(err.Error()))
		return ExitFailed
	}
	return ExitOK
}

const mergeUsage = `Usage: trajflow merge --out DIR [--file-rows N] [--compression C] [--force] [--allow-duplicates] INPUT...

Combines the part files of one or several runs or shards (output directories
or Parquet files) into fewer, larger files in DIR/data without changing a row.
INPUT and DIR may be s3://bucket/prefix URLs.
`

func mergeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("merge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("out", "", "output directory (required)")
	fileRows := fs.Int("file-rows", 100_000, "rows per output file (cut between groups)")
	compression := fs.String("compression", "zstd", "zstd, snappy, gzip or none")
	force := fs.Bool("force", false, "add to an output directory that already holds part files")
	dups := fs.Bool("allow-duplicates", false, "merge rows whose key repeats instead of failing")
	inputs, code := parse(fs, args, mergeUsage, stdout, stderr)
	if code >= 0 {
		return code
	}
	if *out == "" || len(inputs) == 0 {
		fmt.Fprint(stderr, mergeUsage)
		return ExitUsage
	}
	var f fetched
	defer f.close()
	inputs, err := f.localPaths(ctx, inputs)
	if err != nil {
		fmt.Fprintln(stderr, "trajflow merge:", err)
		return storeCode(err)
	}
	// An s3:// --out: the merge writes into a local copy of what it
	// holds, then uploads the new files (each appears whole).
	outDir := *out
	if storage.IsURL(*out) {
		if outDir, err = f.pullOut(ctx, *out); err != nil {
			fmt.Fprintln(stderr, "trajflow merge: --out:", err)
			return storeCode(err)
		}
	}
	res, err := analyze.Merge(ctx, inputs, outDir, analyze.MergeOptions{
		FileRows: *fileRows, Compression: *compression, Force: *force, AllowDuplicates: *dups,
	})
	if err != nil {
		fmt.Fprintln(stderr, "trajflow merge:", f.names(err.Error()))
		return ExitFailed
	}
	if outDir != *out {
		if err := f.upload(ctx, outDir, *out); err != nil {
			fmt.Fprintln(stderr, "trajflow merge: --out:", err)
			return storeCode(err)
		}
	}
	fmt.Fprintf(stdout, "merged %d rows from %d files into %d files in %s/data\n", res.Rows, len(res.Inputs), len(res.Files), *out)
	if res.Duplicates > 0 {
		fmt.Fprintf(stdout, "%d rows repeat an earlier key (--allow-duplicates)\n", res.Duplicates)
	}
	return ExitOK
}

// parse parses flags given anywhere among the arguments and returns the
// positional ones; code is the exit code to return now, or -1 to go on.
func parse(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) (rest []string, code int) {
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				fmt.Fprint(stdout, usage)
				return nil, ExitOK
			}
			msg := err.Error()
			if f, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
				msg = "unknown flag " + f
			}
			fmt.Fprintf(stderr, "trajflow %s: %s\n\n%s", fs.Name(), msg, usage)
			return nil, ExitUsage
		}
		if fs.NArg() == 0 {
			return rest, -1
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
