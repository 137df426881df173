package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/trajflow/trajflow/gateway"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/runner/build"
	"github.com/trajflow/trajflow/runner/commit"
	"github.com/trajflow/trajflow/runner/output"
	"github.com/trajflow/trajflow/runner/resume"
	"github.com/trajflow/trajflow/runner/runstats"
	"github.com/trajflow/trajflow/runner/stop"
	"github.com/trajflow/trajflow/schema"

	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/internal/arrowmem"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema/shards"
	"github.com/trajflow/trajflow/sinks/lines"
	"github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/sources"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/groups"
	"github.com/trajflow/trajflow/stages/loop"
	"github.com/trajflow/trajflow/storage"
)

// Snapshot, Summary, HostedStats, EndpointLoad and ServerLoad are a run's
// figures (see runstats): its progress at one moment, what it did, the
// hosted-API features' figures, each endpoint's load.
type (
	Snapshot     = runstats.Snapshot
	Summary      = runstats.Summary
	HostedStats  = runstats.HostedStats
	EndpointLoad = runstats.EndpointLoad
	ServerLoad   = runstats.ServerLoad
)

// ErrNothingGenerated: the run resolved rollouts but no kept rollout
// generated a token (runstats.ErrNothingGenerated).
var ErrNothingGenerated = runstats.ErrNothingGenerated

// Version is trajflow's version, written into every output file.
var Version = "0.1.0"

// Options are a run's settings that are not part of its config.
type Options struct {
	// Stderr receives the progress line and warnings; nil discards them.
	Stderr io.Writer
	// Progress, when set, receives the run's progress every run.progress
	// (and once at the end) instead of the plain progress line on Stderr:
	// the command line draws a live view with it on a terminal.
	Progress func(Snapshot)
	// Client, when set, is the inference client: the config's endpoints are
	// not contacted (an embedder's own backend, or a test's).
	Client inference.Client
	// Env, when set, is the environment: the config's env.name only labels
	// the rows and its options are not read. Without it, env.name is looked
	// up among the registered environments (envs.Register; the trajflow
	// command registers the built-in ones).
	Env envs.Env
	// Alloc is the Arrow allocator (tests pass a checked one).
	Alloc memory.Allocator
	// AllowConfigChange resumes an output directory even when its committed
	// work came from a config whose semantic keys differ.
	AllowConfigChange bool
	// Abort, when closed after the run's context was cancelled, stops the
	// graceful stop at once (the command's second signal): what is not
	// committed yet is dropped, as under kill -9.
	Abort <-chan struct{}
	// LookupEnv reads the environment variables that source.shard: auto
	// takes the shard from (see sources.Shard.Resolve). Default
	// os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Continuous holds what only a continuous service (trajflow serve)
	// sets: nil for a run that ends.
	Continuous *Continuous
}

// Continuous are the settings of a run that a long-running service drives
// (trajflow serve): its demand, the trainer's policy and staleness, and
// what it hears of the run. Every field may be nil.
type Continuous struct {
	// Policy is the fleet's policy version and the pause that brackets a
	// weight update, passed to the generate stage; nil: version 0, never
	// paused.
	Policy *generate.Policy
	// Supply, when set, makes the run continuous: its target of kept
	// groups replaces groups.target and grows as Raise asks for more; when
	// it is met the run waits for more rather than ending, and groups in
	// flight count toward the next demand. Such a run ends when its
	// context is cancelled or its input runs out.
	Supply *groups.Supply
	// OnCommit, when set, hears of each data file committed (on object
	// storage: once uploaded) with its path and row count.
	OnCommit func(path string, rows int)
	// Collector, when set, is served beside the run's own metrics on
	// run.metrics_addr.
	Collector prometheus.Collector
	// Staleness, when set, gates admission by staleness
	// (groups.Staleness, usually over Policy): a group is handed out only
	// while the gate has capacity, and a kept group that is stale anyway
	// is kept, dropped or sampled again as its OnStale says (filter
	// reason stale). The caller builds it, with the trainer's batch size
	// and max_staleness, and reads its counters.
	Staleness *groups.Staleness
	// Unserved, when set, holds the tasks of the kept groups a service
	// has not handed out (serve.on_stale: requeue): the run holds each
	// kept group's task there, and, resumed, the tasks of the groups it
	// expects; a group the service sets aside as too stale to hand out
	// has its task sampled again in a new attempt, at once or, for one
	// whose task the run has not read again yet, when it does.
	Unserved *groups.Unserved
	// Checked tells Run that the caller checked the config with Check
	// and these options before it started anything of its own (serve
	// does): the config step does not check it again.
	Checked bool
	// Priority, when set, replaces every request's group priority under
	// generate.priority: auto (serve's evaluation: -1, before training's).
	Priority *int
	// Locked tells Run that the caller holds the output directory's lock
	// (resume.LockDir) for the run's whole life (serve takes it before it
	// says it serves): Run does not take it again.
	Locked bool
}

// continuous is opts.Continuous, or none.
func (o Options) continuous() Continuous {
	if o.Continuous != nil {
		return *o.Continuous
	}
	return Continuous{}
}

// lookupEnv is opts.LookupEnv or os.LookupEnv.
func (o Options) lookupEnv() func(string) (string, bool) {
	if o.LookupEnv != nil {
		return o.LookupEnv
	}
	return os.LookupEnv
}

// Run runs the pipeline the config describes and returns its summary. The
// summary is returned with the error too, where the run got far enough to
// have one.
//
// Cancelling ctx stops the run gracefully (run.on_signal, run.grace): no
// more work is admitted, what is in flight is cancelled or drained, every
// finished group is committed and metrics.json written, and Run returns an
// error wrapping ErrInterrupted. A fatal error (a bad input row or page,
// the circuit breaker, run.max_error_rate) stops the run the same way.
func Run(ctx context.Context, cfg *config.Config, opts Options) (_ *Summary, err error) {
	// The run keys its fingerprint to its output directory (UseSecretKey):
	// it works on its own copy, so the caller's config is never changed and
	// may serve several runs at once.
	own := *cfg
	cfg = &own
	// Record batches are built on an allocator that recycles the buffers
	// the sinks release: a batch every few groups would otherwise allocate,
	// zero and garbage-collect all its buffers anew.
	var batchAlloc memory.Allocator = arrowmem.New(0)
	if opts.Alloc == nil {
		opts.Alloc = memory.NewGoAllocator()
	} else {
		batchAlloc = opts.Alloc
	}
	// root is output.dir as given: a sharded run works in its shard's
	// directory under it (ShardDir, in the output step).
	r := &run{cfg: cfg, root: cfg.Output.Dir, opts: opts, batchAlloc: batchAlloc, stopper: stop.New(ctx)}
	r.stats = r.newTracker()
	defer r.stopper.Release()
	defer func() {
		// What the closers failed to flush, close or release is an error
		// of the run's too.
		r.closers.run()
		err = errors.Join(err, r.closers.err)
	}()
	if err := r.provision(ctx); err != nil {
		return nil, err
	}
	// A crash between a commit's renames left part sinks' files (step
	// rows, NeMo Gym JSONL, OpenAI Batch files) without their part.
	if err := commit.Pair(cfg); err != nil {
		return nil, err
	}
	done, err := resume.Load(ctx, cfg, r.resumeOptions())
	if err != nil {
		return nil, err
	}
	r.done = done
	err = r.execute(ctx)
	// Whatever stopped the run, the committed files are whole: their
	// metrics are written, unless the stop overran its grace or was aborted.
	// A shard records whether it read its input to the end (uploaded
	// below with the other side files on object storage).
	if serr := r.writeShardStatus(err); serr != nil {
		err = errors.Join(err, serr)
	}
	if r.stopper.Hard().Err() == nil {
		if merr := r.stats.WriteMetrics(r.stopper.Hard()); merr != nil {
			err = errors.Join(err, merr)
		}
		if aerr := runstats.WriteAggregate(r.stopper.Hard(), r.cfg.Output.Dir, r.built.Envs); aerr != nil {
			// As Gym's rollout collection, whose raise_for_status on
			// /aggregate_metrics fails the command: the committed rows
			// stay.
			err = errors.Join(err, aerr)
		}
		// On object storage, metrics.json and the side files go up last.
		if r.remote.Mirrored() {
			if ierr := r.side.inputs.Flush(); ierr != nil {
				err = errors.Join(err, ierr)
			}
			if perr := r.commit.PushFinal(r.stopper.Hard()); perr != nil {
				err = errors.Join(err, perr)
			}
		}
	}
	sum := r.stats.Summary(err)
	return sum, err
}

// resumeOptions are the options the run reads its committed work with: a
// stale group dropped under on_stale requeue (Continuous.Staleness) has
// its task sampled again after a restart, as it would have been.
func (r *run) resumeOptions() resume.Options {
	o := resume.Options{AllowConfigChange: r.opts.AllowConfigChange, SourcePath: r.built.SourcePath}
	if st := r.opts.continuous().Staleness; st != nil && st.OnStale() == groups.StaleRequeue {
		o.RequeueReason = groups.ReasonStale
	}
	return o
}

// Check reports every problem of the config that a run would meet, without
// creating anything: no output directory, lock, process or connection.
// That covers every section's keys, the environment's name and options
// (unless opts.Env replaces them) and the templates. The error is a
// *config.ValidationError whose lines name where each key was set.
func Check(cfg *config.Config, opts Options) error {
	return build.Check(cfg, opts.Env, opts.lookupEnv())
}

// buildOptions are the build steps' options of a run with opts.
func (o Options) buildOptions() build.Options {
	c := o.continuous()
	return build.Options{Client: o.Client, Env: o.Env, Stderr: o.Stderr, LookupEnv: o.LookupEnv, Policy: c.Policy, Checked: c.Checked}
}

// ShardDir is the output directory of shard index of count under a
// sharded run's root: ROOT/shards/00003-of-00016 (5-digit, zero-padded).
// A root with a scheme (s3://bucket/prefix) is joined as a URL path.
func ShardDir(root string, index, count int) string { return shards.Dir(root, index, count) }

// run is one run's state, from provisioning to cleanup.
type run struct {
	cfg *config.Config
	// root is the output directory the config named: cfg.Output.Dir
	// itself, or for a sharded run the directory of its shards.
	root string
	opts Options
	// stats follows the run: counters, progress, metrics, summary.
	stats *runstats.Tracker
	// batchAlloc is the collators' allocator.
	batchAlloc memory.Allocator

	closers closers
	// built are the run's components (build.Steps): client, generator,
	// environments, template, source, expander.
	built *build.Components
	// commit is the commit path: the output directories' writers, step
	// rows, images, interop sinks and the upload to object storage.
	commit *commit.Committer
	// side are the side files: the rejects, the failures, and
	// OUTPUT/inputs.jsonl (each task's rendered request, once).
	side struct {
		rejects, failures *lines.Writer
		inputs            *resume.Inputs
	}
	// flow is the graph and the stages the stop and the progress reach:
	// the groups controller and the loop.
	flow struct {
		graph *pipeline.Graph
		ctl   *groups.Controller
		loop  *loop.Loop
	}
	// live is what the statistics read from other goroutines (the
	// progress ticker, the Prometheus endpoint): published once the build
	// walk is done, and again once the graph is wired; nil before.
	live    atomic.Pointer[liveParts]
	done    *resume.Committed
	stopper *stop.Stopper
	// remote is the object storage side of an s3:// output.dir or
	// source.path.
	remote output.Remote
}

// provision walks the build steps (build.Steps) with the run's hooks: its
// output step makes the output directory, and the components follow.
// Then it opens the failures log and the interop sinks. cleanup undoes
// what was built even when a later step fails.
func (r *run) provision(ctx context.Context) error {
	h := build.Hooks{
		Output:        r.provisionOutput,
		OnBreak:       func(err error) { r.fail(fmt.Errorf("%w: %w", ErrEndpoint, err)) },
		OnReject:      r.reject,
		OnInvalidUTF8: r.invalidUTF8,
		SourcePath: func(ctx context.Context) (string, error) {
			return r.remote.Source(ctx, r.cfg.Source.Path, &r.closers)
		},
		// The run's Prometheus metrics, when the output step serves them.
		OnAttempt: r.stats.Attempt,
		WrapEnv:   r.stats.WrapEnv,
	}
	r.built = build.New(r.cfg, r.opts.buildOptions(), h)
	r.opts.Stderr = r.built.Stderr
	if err := r.built.Walk(ctx, build.RunStep); err != nil {
		return err
	}
	r.live.Store(&liveParts{built: r.built})
	if r.built.HTTP() != nil {
		// The endpoints' own metrics: their load for the live view and
		// Prometheus, their token counters for the summary.
		r.stats.Scrape(r.cfg.Generate.Endpoints)
	}
	r.side.failures = lines.New(filepath.Join(r.cfg.Output.Dir, schema.FailuresFile))
	r.closers.Check(r.side.failures.Close)
	// What is not committed is dropped at the end: the open files of the
	// writers and the interop sinks.
	r.closers.Check(r.commit.Abort)
	return r.commit.OpenInterop(r.cfg, r.opts.Alloc)
}

// provisionOutput is the run's output step: it resolves the shard, makes
// the output directory (on object storage, its staging mirror), takes its
// lock, removes what a crashed run left half-written, and opens the
// committer, the rejects and inputs files and the Prometheus endpoint.
// The components built by the later steps are closed before what it
// opened.
func (r *run) provisionOutput(ctx context.Context) error {
	cfg := r.cfg
	// A sharded run works in its shard's directory under the root
	// (ShardDir); the root keeps what every shard shares.
	if err := cfg.ResolveShard(r.opts.lookupEnv()); err != nil {
		return err
	}
	if cfg.Source.Shard.Sharded() {
		cfg.Output.Dir = ShardDir(r.root, cfg.Source.Shard.Index, cfg.Source.Shard.Count)
	}
	rootOpts := resume.RootOptions{Root: r.root, AllowConfigChange: r.opts.AllowConfigChange, Version: Version}
	if err := output.Root(ctx, cfg, rootOpts, &r.closers); err != nil {
		return err
	}
	if storage.IsURL(cfg.Output.Dir) {
		if err := r.remote.Provision(ctx, cfg, r.fail, &r.closers); err != nil {
			return err
		}
	}
	if err := durable.MkdirAll(cfg.Output.Dir, 0o755); err != nil {
		return fmt.Errorf("output.dir: %w", err)
	}
	if !r.opts.continuous().Locked {
		unlock, err := resume.LockDir(cfg.Output.Dir)
		if err != nil {
			return err
		}
		r.closers.Check(unlock)
	}
	// What a crashed run left half-written goes before anything is read.
	var err error
	if r.commit, err = commit.Open(cfg, r.parquetOptions(), commit.Hooks{Committed: r.stats.Committed, Upload: r.remote.Upload()}); err != nil {
		return err
	}
	r.side.rejects = lines.New(filepath.Join(cfg.Output.Dir, schema.RejectsFile))
	r.closers.Check(r.side.rejects.Close)
	if r.side.inputs, err = resume.OpenInputs(filepath.Join(cfg.Output.Dir, schema.InputsFile)); err != nil {
		return err
	}
	r.closers.Check(r.side.inputs.Close)
	if cfg.Run.MetricsAddr != "" {
		stop, err := r.stats.ServeMetrics(ctx, cfg.Run.MetricsAddr, r.opts.continuous().Collector)
		if err != nil {
			return err
		}
		r.closers.Add(stop)
	}
	// The components the later steps build close first.
	r.closers.Check(r.built.Close)
	return nil
}

// parquetOptions are the options of every Parquet writer of the run.
func (r *run) parquetOptions() parquet.Options {
	cfg := r.cfg
	fp, canonical := cfg.Fingerprint()
	params, _ := json.Marshal(config.RedactValue([]string{"generate", "params"}, map[string]any(cfg.Generate.Params)))
	opts := parquet.Options{
		FileRows:     cfg.Output.Parquet.FileRows,
		FileBytes:    cfg.Output.Parquet.FileBytes,
		RowGroupRows: cfg.Output.Parquet.RowGroupRows,
		Compression:  cfg.Output.Parquet.Compression,
		Metadata: map[string]string{
			schema.MetadataKey:          schema.Version,
			schema.KeyVersion:           Version,
			schema.KeyRunID:             cfg.Run.ID,
			schema.KeyModel:             cfg.Generate.Model,
			schema.KeyConfigFingerprint: fp,
			schema.KeySamplingParams:    string(params),
			schema.KeyConfig:            canonical,
		},
		// What was read of the input when the file is committed: a resume
		// checks that its input starts with the same bytes.
		CommitMetadata: func() (map[string]string, error) {
			// The tasks of the file being committed were rendered, so their
			// lines of inputs.jsonl are made durable before the file is
			// visible; when that fails, so does the file's commit (before,
			// the error was printed and the file committed all the same).
			if err := r.side.inputs.Flush(); err != nil {
				return nil, err
			}
			id, _ := json.Marshal(r.built.Source.Identity())
			return map[string]string{schema.KeySource: string(id)}, nil
		},
	}
	maps.Copy(opts.Metadata, r.stats.PriceMetadata())
	return opts
}

// execute builds the graph and runs it on the stopper's hard context; a
// cancel of ctx begins the graceful stop.
func (r *run) execute(parent context.Context) error {
	cfg := r.cfg
	ctx := r.stopper.Hard()
	g := pipeline.NewGraph()
	r.flow.graph = g
	r.stats.ServerBaseline(ctx)
	r.stats.Start()
	stopProgress := r.stats.Progress(ctx)
	defer stopProgress()

	r.flow.ctl = r.newController()
	if u := r.opts.continuous().Unserved; u != nil {
		u.Bind(r.flow.ctl.Requeue)
	}
	r.setPriority()
	r.setEarlyCancel()
	if err := r.wire(g); err != nil {
		return err
	}
	r.live.Store(&liveParts{built: r.built, graph: g, loop: r.flow.loop})
	watched := make(chan struct{})
	go r.stopper.Watch(parent, r.opts.Abort, watched, r.interrupted)
	defer close(watched)
	err := g.Run(ctx)
	r.stats.ServerFinal(ctx)
	if err != nil {
		if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil {
			// The stop overran run.grace, or was aborted.
			err = cause
			if why := r.stopper.Err(); why != nil {
				err = fmt.Errorf("%w: %w", why, cause)
			}
			return fmt.Errorf("%w; what was not committed is dropped (a rerun redoes it)", err)
		}
		return err
	}
	if err := r.stopper.Err(); err != nil {
		return err
	}
	if err := r.checkErrorRate(true); err != nil {
		return err
	}
	if err := r.stats.CheckGenerated(); err != nil {
		return err
	}
	if kept, short := r.flow.ctl.ShortOfTarget(); short {
		return fmt.Errorf("%w: kept %d of %d groups; the kept groups are committed", ErrShortOfData, kept, cfg.Groups.Target)
	}
	return nil
}

// liveParts are the run's parts the statistics read while it runs
// (run.live).
type liveParts struct {
	built *build.Components
	graph *pipeline.Graph
	loop  *loop.Loop
}

// ErrConfigChanged and ErrSchemaVersion are returned when the output
// directory holds work of another config, or files of another schema
// version (resume.ErrConfigChanged, resume.ErrSchemaVersion).
var (
	ErrConfigChanged = resume.ErrConfigChanged
	ErrSchemaVersion = resume.ErrSchemaVersion
)

// newTracker is the run's runstats.Tracker, reading the run's parts as
// they are built.
func (r *run) newTracker() *runstats.Tracker {
	return runstats.New(r.cfg, runstats.Inputs{
		Progress: r.opts.Progress, Stderr: r.opts.Stderr, Alloc: r.opts.Alloc,
		Hosted: r.hostedStats, HTTP: r.httpClient,
		Source: func() sources.Reader {
			if p := r.live.Load(); p != nil {
				return p.built.Source
			}
			return nil
		},
		Gateway: func() (gateway.Stats, bool) {
			if p := r.live.Load(); p != nil && p.built.Gateway != nil {
				return p.built.Gateway.Stats(), true
			}
			return gateway.Stats{}, false
		},
		Requests: func() (cancelled, estimate int64) {
			p := r.live.Load()
			if p == nil || p.built.Generator == nil {
				return 0, 0
			}
			st := p.built.Generator.Requests()
			return st.Cancelled, st.CancelledTokensEstimate
		},
		Busy: func() (int, int) {
			if p := r.live.Load(); p != nil && p.loop != nil {
				return p.loop.Busy()
			}
			return 0, 0
		},
		Queues: func() map[string]int {
			if p := r.live.Load(); p != nil && p.graph != nil {
				return p.graph.QueueDepths()
			}
			return nil
		},
		Display:     func(p string) string { return r.remote.Display(r.cfg.Output.Dir, p) },
		Stop:        r.stopper.Err,
		EarlierKept: func() int { return r.done.Kept },
		OnCommit:    r.opts.continuous().OnCommit,
	})
}

// ErrShortOfData is returned when the input ran out before groups.target
// kept groups: what was kept is committed.
var ErrShortOfData = errors.New("the data ran out before the kept-group target")

// ErrLineTooLong is wrapped by the error of a run stopped by an input line
// over source.max_line_bytes (under on_bad_row: error): the input does
// not fit the config, whose keys are the remedy.
var ErrLineTooLong = sources.ErrLineTooLong
