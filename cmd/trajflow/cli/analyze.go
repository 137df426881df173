package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/trajflow/trajflow/runner/analyze"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/schema/shards"
	"github.com/trajflow/trajflow/storage"
)

const statsUsage = `Usage: trajflow stats [--json] [--metric NAME] [--threshold X] [--use-reward] DIR|FILE...

Computes a run's metrics (reward, pass@k, pass^k, mean@k, completion, token
and turn statistics) from its Parquet files alone. A DIR is an output
directory (its data/part-*.parquet), a sharded run's root (every shard's
data, with a line on stderr saying how many shards it holds and which are
missing or incomplete against its manifest.json), or a directory of
Parquet files. An s3://bucket/prefix stands for the output directory or
root there (endpoint and credentials from AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
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
	if _, err := reportShards("stats", paths, &namedWriter{stderr, &f}); err != nil {
		fmt.Fprintln(stderr, "trajflow stats:", f.names(err.Error()))
		return ExitFailed
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

const mergeUsage = `Usage: trajflow merge [flags] INPUT... DEST
       trajflow merge --out DEST [flags] INPUT...

Combines the part files of one or several runs or shards (output
directories, a sharded run's root, or Parquet files) into fewer, larger
files in DEST/data without changing a row. The dataset is committed whole:
it is written beside DEST and renamed into place at the end, so a reader
sees no DEST or all of it. DEST must not exist or be empty, unless --force.

A sharded run's root (ROOT/manifest.json, ROOT/shards/*/) stands for every
shard; merge refuses a root whose shards are missing or incomplete against
its manifest, unless --allow-partial.

  --rows-per-file N        spread the rows evenly over ceil(rows/N) files
  --target-file-size SIZE  files of about SIZE (256MB, 1GiB): the rows are
                           spread evenly over (input bytes / SIZE) files
  --file-rows N            cut a file once it holds N rows (default 100000;
                           the last file takes what is left)
  --compression C          zstd (default), snappy, gzip or none
  --force                  add to a DEST that is not empty (files are then
                           committed one by one)
  --allow-duplicates       merge rows whose key repeats instead of failing
  --allow-partial          merge a sharded root with missing or incomplete
                           shards
Files are cut only between groups.
INPUT and DEST may be s3://bucket/prefix URLs.
`

func mergeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("merge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("out", "", "output directory (default: the last argument)")
	fileRows := fs.Int("file-rows", 100_000, "rows per output file (cut between groups)")
	rowsPerFile := fs.Int("rows-per-file", 0, "spread the rows evenly over ceil(rows/N) files")
	targetSize := fs.String("target-file-size", "", "aim at files of about this size")
	compression := fs.String("compression", "zstd", "zstd, snappy, gzip or none")
	force := fs.Bool("force", false, "add to an output directory that is not empty")
	dups := fs.Bool("allow-duplicates", false, "merge rows whose key repeats instead of failing")
	partial := fs.Bool("allow-partial", false, "merge a sharded root with missing or incomplete shards")
	inputs, code := parse(fs, args, mergeUsage, stdout, stderr)
	if code >= 0 {
		return code
	}
	if *out == "" && len(inputs) >= 2 {
		*out, inputs = inputs[len(inputs)-1], inputs[:len(inputs)-1]
	}
	if *out == "" || len(inputs) == 0 {
		fmt.Fprint(stderr, mergeUsage)
		return ExitUsage
	}
	opts := analyze.MergeOptions{
		FileRows: *fileRows, Compression: *compression, Force: *force, AllowDuplicates: *dups,
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["rows-per-file"] && set["target-file-size"] || set["file-rows"] && (set["rows-per-file"] || set["target-file-size"]) {
		fmt.Fprintf(stderr, "trajflow merge: --file-rows, --rows-per-file and --target-file-size are alternatives: give one\n")
		return ExitUsage
	}
	if set["rows-per-file"] {
		if *rowsPerFile < 1 {
			fmt.Fprintf(stderr, "trajflow merge: --rows-per-file %d: must be >= 1\n", *rowsPerFile)
			return ExitUsage
		}
		opts.FileRows, opts.EvenFiles = *rowsPerFile, true
	}
	if set["target-file-size"] {
		size, err := analyze.ParseSize(*targetSize)
		if err != nil {
			fmt.Fprintf(stderr, "trajflow merge: --target-file-size: %v\n", err)
			return ExitUsage
		}
		opts.TargetFileBytes = size
	}
	var f fetched
	defer f.close()
	inputs, err := f.localPaths(ctx, inputs)
	if err != nil {
		fmt.Fprintln(stderr, "trajflow merge:", err)
		return storeCode(err)
	}
	// An s3:// DEST: the merge writes into a local directory standing
	// for it, then uploads the new files (each appears whole).
	outDir := *out
	if storage.IsURL(*out) {
		if outDir, err = f.pullOut(ctx, *out); err != nil {
			fmt.Fprintln(stderr, "trajflow merge: --out:", err)
			return storeCode(err)
		}
	}
	sets, err := reportShards("merge", inputs, &namedWriter{stderr, &f})
	if err != nil {
		fmt.Fprintln(stderr, "trajflow merge:", f.names(err.Error()))
		return ExitFailed
	}
	for _, s := range sets {
		if !s.Whole() && !*partial {
			fmt.Fprintf(stderr, "trajflow merge: %s is not whole (%s); run the missing or incomplete shards again (they resume), or --allow-partial to merge what is there\n",
				f.names(s.Root), s.Summary())
			return ExitFailed
		}
	}
	res, err := analyze.Merge(ctx, inputs, outDir, opts)
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
	fmt.Fprintf(stdout, "merged %d rows from %d files into %d files in %s\n", res.Rows, len(res.Inputs), len(res.Files), storage.Join(*out, schema.DataDir))
	if res.Duplicates > 0 {
		fmt.Fprintf(stdout, "%d rows repeat an earlier key (--allow-duplicates)\n", res.Duplicates)
	}
	if res.Steps {
		fmt.Fprintf(stdout, "with their step rows: a steps file beside each, in %s\n", storage.Join(*out, schema.StepsDir))
	}
	if res.Images+res.ImagesHad > 0 {
		fmt.Fprintf(stdout, "images: %d copied into %s (%d already there)\n", res.Images, storage.Join(*out, schema.ImagesDir), res.ImagesHad)
	}
	return ExitOK
}

// reportShards prints, for each of paths that is a sharded run's root, a
// line saying how many shards it holds and which are missing or
// incomplete against its manifest.
func reportShards(cmd string, paths []string, stderr io.Writer) ([]*shards.Set, error) {
	sets, err := analyze.Shards(paths)
	if err != nil {
		return nil, err
	}
	for _, s := range sets {
		fmt.Fprintf(stderr, "trajflow %s: %s: %s\n", cmd, s.Root, s.Summary())
	}
	return sets, nil
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
