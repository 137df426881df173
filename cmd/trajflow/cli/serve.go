package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/serve/client"
)

const serveUsage = `Usage: trajflow serve CONFIG.yaml [--addr HOST:PORT] [--set section.key=value ...]
       trajflow serve --replay OUT [--addr HOST:PORT] [--set serve.key=value ...]

Runs the pipeline continuously and hands out training steps over HTTP
(docs/serve.md): GET /v1/steps/next?groups=K, POST /v1/steps/N/ack,
POST /v1/policy, /v1/pause, /v1/resume, GET /v1/status, GET /healthz.

  --addr HOST:PORT          listen here (serve.addr, default 127.0.0.1:8700);
                            any address but loopback needs serve.token_env
  --set section.key=value   override a config key (YAML value), repeatable
  --allow-config-change     resume an output directory whose committed work
                            came from a config with other semantic keys
  --replay OUT              serve the steps a service recorded in the output
                            directory OUT again, in the same order and bytes,
                            with no engine and no config (its leases and acks
                            in OUT/replay; the serve section by --set serve.…)

On SIGINT, SIGTERM or SIGHUP the service stops as a run does: no more work
is admitted, every finished group is committed, and a restart serves the
steps not acknowledged again. Exit codes: 1 failed, 2 bad config (a missing
token included), 4 too many failures, 130 stopped by a signal.
`

// serveLine is the live view's line of the service.
func serveLine(st client.Status) string {
	paused := ""
	if st.Paused {
		paused = ", paused (" + st.PauseMode + ")"
	}
	return fmt.Sprintf("serve     steps %d made, %d acked, %d leased, %d to serve again; %d groups queued, %d waiting; policy v%d%s",
		st.Steps.Made, st.Steps.Acked, st.Steps.Leased, st.Steps.Pending, st.QueuedGroups, len(st.Waiting), st.PolicyVersion, paused)
}

func serveCmd(ctx context.Context, abort <-chan struct{}, args []string, stdout, stderr io.Writer) int {
	for _, a := range args {
		if name, _, _ := strings.Cut(a, "="); name == "--replay" {
			return replayCmd(ctx, args, stdout, stderr)
		}
	}
	allowChange := false
	var addr string
	path, sets, code := configArgs("serve", serveUsage, args, stdout, stderr, func(a string, next func() (string, bool)) (bool, int) {
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--allow-config-change":
			allowChange = true
		case "--addr":
			v, ok := next()
			if !ok || v == "" {
				fmt.Fprintf(stderr, "trajflow serve: --addr needs HOST:PORT\n\n%s", serveUsage)
				return true, ExitUsage
			}
			addr = v
		default:
			return false, -1
		}
		return true, -1
	})
	if code >= 0 {
		return code
	}
	cfg, err := config.Read(path, sets)
	if err == nil && addr != "" {
		err = cfg.SetByFlag("serve.addr", addr, "--addr")
	}
	if err == nil {
		err = serve.Check(cfg, serve.Options{})
	}
	if err != nil {
		fmt.Fprintln(stderr, "trajflow serve:", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitUsage
	}
	red := cfg.Redactor()
	opts := serve.Options{Abort: abort, AllowConfigChange: allowChange}
	var view *liveView
	if cfg.Run.Progress > 0 && liveTerminal(stderr) {
		// On a terminal, the run's live view and a line of the service's.
		view = newLiveView(stderr)
		var mu sync.Mutex
		var st client.Status
		view.line(func() string {
			mu.Lock()
			defer mu.Unlock()
			return serveLine(st)
		})
		opts.Progress = func(snap runner.Snapshot, s client.Status) {
			mu.Lock()
			st = s
			mu.Unlock()
			view.update(snap)
		}
	}
	stderr = red.Writer(stderr)
	opts.Stderr = stderr
	err = serve.Run(ctx, cfg, opts)
	if view != nil {
		view.done()
	}
	var invalid *config.ValidationError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &invalid):
		fmt.Fprintln(stderr, "trajflow serve:", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitUsage
	case errors.Is(err, runner.ErrLineTooLong):
		fmt.Fprintf(stderr, "trajflow serve: %v; %s\n", err, lineTooLongHint)
		return ExitUsage
	case errors.Is(err, runner.ErrEndpoint) || errors.Is(err, runner.ErrErrorRate):
		fmt.Fprintln(stderr, "trajflow serve:", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitErrors
	case durable.DiskFull(err) || durable.IOError(err):
		msg, _ := diskMessage("serve", cfg.Output.Dir, err)
		fmt.Fprint(stderr, msg)
		return ExitDisk
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "trajflow serve: stopped (%v); committed steps are kept, a restart serves those not acknowledged\n", context.Cause(ctx))
		return ExitInterrupted
	default:
		fmt.Fprintln(stderr, "trajflow serve:", err)
		return ExitFailed
	}
}

// replayCmd is `trajflow serve --replay OUT`: the steps OUT recorded,
// served again (serve.Replay).
func replayCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var out, addr string
	var sets []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, v, hasV := strings.Cut(a, "=")
		value := func() (string, bool) {
			if hasV {
				return v, true
			}
			if i+1 >= len(args) {
				return "", false
			}
			i++
			return args[i], true
		}
		var ok bool
		switch name {
		case "-h", "--help":
			fmt.Fprint(stdout, serveUsage)
			return ExitOK
		case "--replay":
			out, ok = value()
		case "--addr":
			addr, ok = value()
		case "--set":
			var s string
			s, ok = value()
			if ok && !strings.HasPrefix(s, "serve.") {
				fmt.Fprintf(stderr, "trajflow serve --replay: --set %s: a replay takes the serve section's keys alone (serve.lease, serve.token_env, …)\n", s)
				return ExitUsage
			}
			sets = append(sets, s)
		default:
			fmt.Fprintf(stderr, "trajflow serve --replay: unexpected %s (a replay takes no config)\n\n%s", a, serveUsage)
			return ExitUsage
		}
		if !ok || (name != "--set" && strings.TrimSpace(args[i]) == "") {
			fmt.Fprintf(stderr, "trajflow serve: %s needs a value\n\n%s", name, serveUsage)
			return ExitUsage
		}
	}
	cfg, err := config.Decode([]byte("{}"), "--replay", sets)
	if err == nil && addr != "" {
		err = cfg.SetByFlag("serve.addr", addr, "--addr")
	}
	if err != nil {
		fmt.Fprintln(stderr, "trajflow serve --replay:", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitUsage
	}
	stderr = cfg.Redactor().Writer(stderr)
	err = serve.Replay(ctx, out, cfg.Serve, serve.Options{Stderr: stderr})
	switch {
	case err == nil || ctx.Err() != nil && err == nil:
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "trajflow serve: stopped (%v); the replay's acks are kept in %s\n", context.Cause(ctx), out)
			return ExitInterrupted
		}
		return ExitOK
	default:
		fmt.Fprintln(stderr, "trajflow serve --replay:", err)
		return ExitFailed
	}
}
