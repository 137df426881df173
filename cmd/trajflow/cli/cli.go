package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/runner"
)

// Exit codes. Whatever the code, committed files are whole and a rerun
// resumes.
const (
	ExitOK          = 0
	ExitFailed      = 1 // the run failed (a sink, a bad input row, an environment set-up, ...)
	ExitUsage       = 2 // bad arguments or a bad config, or an input line over source.max_line_bytes
	ExitShortOfData = 3 // the data ran out before groups.target kept groups
	// ExitErrors: the rollouts kept failing: an inference endpoint failed
	// the check before the run, the circuit breaker opened, or the share of
	// error rollouts exceeded run.max_error_rate; or no kept rollout
	// generated a token; or object storage refused the run (credentials,
	// bucket, endpoint).
	ExitErrors = 4
	// ExitDisk: the disk failed a write: it is full (no space left on
	// device, or the quota is exceeded) or reported an I/O error. The
	// commit that met it was abandoned; what was committed before is
	// whole, and a rerun (after freeing space) resumes.
	ExitDisk        = 5
	ExitInterrupted = 130 // a signal stopped the run
)

const usage = `trajflow turns datasets of tasks into reinforcement-learning rollouts.

Usage:
  trajflow run CONFIG.yaml [--set section.key=value ...]
  trajflow validate CONFIG.yaml [--set ...] [--rows N]   check a config, write nothing
  trajflow serve CONFIG.yaml [--addr HOST:PORT]       hand out training steps over HTTP
  trajflow stats [--json] DIR|FILE...                 metrics from the Parquet alone (a sharded root: every shard)
  trajflow merge INPUT... DEST                        combine part files into one dataset
  trajflow report OUTPUT [-o report.html]             one self-contained HTML report
  trajflow slurm CONFIG.yaml --shards N [--submit] [flags]   a Slurm array job and its merge job
  trajflow sim-server [--addr 127.0.0.1:8000] [flags]   (--help for the flags)
  trajflow version

Run "trajflow run --help" for the run flags; docs/config.md documents the config.
`

// Main runs the command line and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if durable.SyncsDisabled {
		fmt.Fprintln(stderr, "trajflow: built with -tags nosync, a benchmarking build (bench/powercut): nothing is synced, and a power cut may lose every committed file")
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	ctx, abort, stop := signals(stderr)
	defer stop()
	switch args[0] {
	case "run":
		return runCmd(ctx, abort, args[1:], stdout, stderr)
	case "validate":
		return validateCmd(ctx, args[1:], stdout, stderr)
	case "serve":
		return serveCmd(ctx, abort, args[1:], stdout, stderr)
	case "sim-server":
		if err := sim.Main(ctx, args[1:], stdout, stderr); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "trajflow sim-server:", err)
			return ExitFailed
		}
		return ExitOK
	case "stats":
		return statsCmd(ctx, args[1:], stdout, stderr)
	case "merge":
		return mergeCmd(ctx, args[1:], stdout, stderr)
	case "report":
		return reportCmd(ctx, args[1:], stdout, stderr)
	case "slurm":
		return slurmCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "trajflow", runner.Version)
		return ExitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	default:
		fmt.Fprintf(stderr, "trajflow: unknown command %q\n\n%s", args[0], usage)
		return ExitUsage
	}
}

const runUsage = `Usage: trajflow run CONFIG.yaml [--set section.key=value ...]

  --set section.key=value   override a config key (YAML value), repeatable
  --quiet                   no progress line
  --allow-config-change     resume an output directory whose committed work
                            came from a config with other semantic keys
  --keep-errors             a resume keeps the groups that failed before
                            (run.resume_errors=keep) instead of redoing them

On SIGINT, SIGTERM or SIGHUP the run stops admitting work, cancels (or,
with run.on_signal=drain, finishes) what is in flight, commits every
finished group and writes metrics.json, within run.grace; a second signal
exits at once. Exit codes: 0 done, 1 failed, 2 bad config, 3 short of
groups.target, 4 too many failures (endpoint check, circuit breaker,
run.max_error_rate), 130 interrupted.
`

func runCmd(ctx context.Context, abort <-chan struct{}, args []string, stdout, stderr io.Writer) int {
	quiet, allowChange, keepErrors := false, false, false
	path, sets, code := configArgs("run", runUsage, args, stdout, stderr, func(a string, _ func() (string, bool)) (bool, int) {
		switch a {
		case "--quiet", "-q":
			quiet = true
		case "--allow-config-change":
			allowChange = true
		case "--keep-errors":
			keepErrors = true
		default:
			return false, -1
		}
		return true, -1
	})
	if code >= 0 {
		return code
	}
	if keepErrors {
		sets = append(sets, "run.resume_errors=keep")
	}
	if quiet {
		sets = append(sets, "run.progress=0")
	}
	cfg, err := config.Read(path, sets)
	if err == nil {
		err = runner.Check(cfg, runner.Options{})
	}
	if err != nil {
		fmt.Fprintln(stderr, "trajflow run:", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitUsage
	}
	// Everything printed from here on passes the config's redactor: errors
	// may quote a URL, a header or a server's echo of a key.
	red := cfg.Redactor()
	opts := runner.Options{AllowConfigChange: allowChange, Abort: abort}
	var view *liveView
	if !quiet && cfg.Run.Progress > 0 && liveTerminal(stderr) {
		// On a terminal, a live view instead of the periodic line; the
		// snapshot it draws holds no secret (endpoints are redacted).
		view = newLiveView(stderr)
		opts.Progress = view.update
	}
	stdout, stderr = red.Writer(stdout), red.Writer(stderr)
	opts.Stderr = stderr
	sum, err := runner.Run(ctx, cfg, opts)
	if view != nil {
		view.done()
	}
	if sum != nil {
		fmt.Fprint(stdout, sum.String())
	}
	var invalid *config.ValidationError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &invalid) || errors.Is(err, runner.ErrManifest):
		fmt.Fprintln(stderr, "trajflow run:", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitUsage
	case errors.Is(err, runner.ErrLineTooLong):
		fmt.Fprintf(stderr, "trajflow run: %v; %s\n", err, lineTooLongHint)
		return ExitUsage
	case errors.Is(err, runner.ErrShortOfData):
		fmt.Fprintln(stderr, "trajflow run:", err)
		return ExitShortOfData
	case errors.Is(err, runner.ErrEndpoint) || errors.Is(err, runner.ErrErrorRate) || errors.Is(err, runner.ErrStorage) ||
		errors.Is(err, runner.ErrNothingGenerated):
		fmt.Fprintln(stderr, "trajflow run:", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitErrors
	case durable.DiskFull(err) || durable.IOError(err):
		msg, _ := diskMessage("run", cfg.Output.Dir, err)
		fmt.Fprint(stderr, msg)
		return ExitDisk
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		fmt.Fprintf(stderr, "trajflow run: %v; committed files are complete, run again to resume\n", err)
		return ExitInterrupted
	default:
		fmt.Fprintln(stderr, "trajflow run:", err)
		return ExitFailed
	}
}

// lineTooLongHint follows an input line over source.max_line_bytes: the
// input does not fit the config, and the remedy is in the config.
const lineTooLongHint = "raise source.max_line_bytes, or set source.on_bad_row: skip to leave the line out"

// signals returns a context cancelled by the first SIGINT, SIGTERM or
// SIGHUP (its cause names the signal) and a channel closed by the second.
// After the second, the process exits with 130 if it has not ended within
// abortExit. stop releases the signals.
func signals(stderr io.Writer) (ctx context.Context, abort <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	aborted := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			cancel(fmt.Errorf("signal %v", s))
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(stderr, "trajflow: second signal (%v): exiting at once; what was not committed is dropped\n", s)
			close(aborted)
		case <-done:
			return
		}
		select {
		case <-time.After(abortExit):
			os.Exit(ExitInterrupted)
		case <-done:
		}
	}()
	return ctx, aborted, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

// abortExit is how long a second signal waits for the run to end.
const abortExit = 3 * time.Second

// configArgs parses a command's arguments: one config file, --set
// section.key=value (repeatable, also --set=…), -h, and the command's own
// flags through own, which reports whether it took a flag (next reads the
// flag's value) and an exit code to stop with (-1: go on). code is -1 when
// the arguments are complete, else the exit code.
func configArgs(cmd, usage string, args []string, stdout, stderr io.Writer, own func(a string, next func() (string, bool)) (bool, int)) (path string, sets []string, code int) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() (string, bool) {
			if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "--") {
				return v, true
			}
			if i+1 >= len(args) {
				return "", false
			}
			i++
			return args[i], true
		}
		name, _, _ := strings.Cut(a, "=")
		switch {
		case a == "-h" || a == "--help":
			fmt.Fprint(stdout, usage)
			return "", nil, ExitOK
		case name == "--set" || a == "-set":
			v, ok := next()
			if !ok {
				fmt.Fprintf(stderr, "trajflow %s: --set needs section.key=value\n\n%s", cmd, usage)
				return "", nil, ExitUsage
			}
			sets = append(sets, v)
		case strings.HasPrefix(a, "-"):
			took, c := own(a, next)
			if c >= 0 {
				return "", nil, c
			}
			if !took {
				fmt.Fprintf(stderr, "trajflow %s: unknown flag %s\n\n%s", cmd, a, usage)
				return "", nil, ExitUsage
			}
		case path == "":
			path = a
		default:
			fmt.Fprintf(stderr, "trajflow %s: one config file, got %q and %q\n", cmd, path, a)
			return "", nil, ExitUsage
		}
	}
	if path == "" {
		fmt.Fprint(stderr, usage)
		return "", nil, ExitUsage
	}
	return path, sets, -1
}
