package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/serve/client"
	"github.com/trajflow/trajflow/storage"
)

// Options are the settings of Run that are not part of the config.
type Options struct {
	// Stderr receives the service's log lines and the run's warnings,
	// through the config's redactor; nil discards them.
	Stderr io.Writer
	// Client and Env replace the config's endpoints and environment, as
	// for runner.Run.
	Client inference.Client
	Env    envs.Env
	// Abort, closed after ctx was cancelled, ends the graceful stop at
	// once (the command's second signal).
	Abort <-chan struct{}
	// LookupEnv reads the token's variable (serve.token_env) and the
	// shard's; default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// AllowConfigChange resumes an output whose committed work came from
	// a config with other semantic keys.
	AllowConfigChange bool
	// Listening, when set, hears the address the service listens on once
	// it accepts requests.
	Listening func(addr net.Addr)
	// Progress, when set, receives the run's progress and the service's
	// status twice a second instead of the plain line on Stderr every
	// run.progress (the command line draws a live view with it).
	Progress func(runner.Snapshot, client.Status)
}

func (o Options) lookupEnv() func(string) (string, bool) {
	if o.LookupEnv != nil {
		return o.LookupEnv
	}
	return os.LookupEnv
}

// Check reports every problem of the config that serve would meet before
// anything is created: the run's (runner.Check), the keys serve cannot
// honour, and the bearer token's variable. The error is a
// *config.ValidationError naming each key.
func Check(cfg *config.Config, opts Options) error {
	if err := runner.Check(cfg, runner.Options{Env: opts.Env, Client: opts.Client, LookupEnv: opts.LookupEnv}); err != nil {
		return err
	}
	var p pipeline.Problems
	if cfg.Groups.Target != 0 {
		p.Add("groups.target", "serve sizes each step by its request (GET /v1/steps/next?groups=K); leave groups.target unset")
	}
	if storage.IsURL(cfg.Output.Dir) {
		p.Add("output.dir", "serve needs a local directory")
	}
	if cfg.Source.Shard.Sharded() || cfg.Source.Shard.Auto {
		p.Add("source.shard", "serve reads the whole input; leave source.shard unset")
	}
	if cfg.Serve.NeedsToken() && cfg.Serve.TokenEnv == "" {
		p.Add("serve.token_env", "required: serve.addr %s is not a loopback address, and anyone who can reach it could take steps or pause the fleet; name the environment variable holding a bearer token", cfg.Serve.Addr)
	}
	if name := cfg.Serve.TokenEnv; name != "" {
		if v, ok := opts.lookupEnv()(name); !ok || v == "" {
			p.Add("serve.token_env", "the variable %s is unset or empty: it must hold the bearer token", name)
		}
	}
	return cfg.Locate(p.Err())
}

// Run serves training steps from the pipeline the config describes until
// ctx is cancelled: it runs the pipeline continuously (runner.Run), its
// demand set by the trainers' requests, commits kept groups to data/ as a
// run does, and hands them out as steps over HTTP (docs/serve.md). A
// cancel of ctx stops it as a run stops (run.on_signal, run.grace): the
// finished groups are committed and the served state is whole. It walks
// Steps, then serves; what the steps built is closed, last first, also
// after an error.
func Run(ctx context.Context, cfg *config.Config, opts Options) (err error) {
	b := newBoot(cfg, opts)
	defer func() {
		// The locks are what let the next service in: a failed release
		// is an error of this one's.
		err = errors.Join(err, b.close())
	}()
	if err := b.walk(ctx); err != nil {
		return err
	}
	return b.serve(ctx)
}

// progressLine is the service's periodic line on stderr.
func progressLine(st client.Status) string {
	paused := ""
	if st.Paused {
		paused = " (paused, " + st.PauseMode + ")"
	}
	return fmt.Sprintf("steps %d made, %d acked, %d leased, %d to serve again; %d groups queued, %d requests waiting; policy v%d%s; in flight %d gen %d env; keep rate %.2f",
		st.Steps.Made, st.Steps.Acked, st.Steps.Leased, st.Steps.Pending, st.QueuedGroups, len(st.Waiting), st.PolicyVersion, paused, st.InGeneration, st.InEnvironment, st.KeepRate)
}
