package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sources"
	"github.com/trajflow/trajflow/stages/envstep"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/repeat"
	"github.com/trajflow/trajflow/stages/template"
	"github.com/trajflow/trajflow/storage"
)

// BuildOptions are the settings of Build.
type BuildOptions struct {
	// Options are a run's options: Client and Env replace the config's
	// endpoints and environment as they do for Run.
	Options
	// Hooks observe the components built.
	Hooks Hooks
}

// Hooks let the caller of Build observe the components it builds; every
// one may be nil.
type Hooks struct {
	// OnBreak is called when the HTTP client's circuit breaker opens (Run
	// stops the run).
	OnBreak func(error)
	// OnAttempt observes each HTTP attempt (Run's Prometheus metrics).
	OnAttempt func(endpoint string, took time.Duration, err *inference.Error, retrying bool)
	// WrapEnv wraps each route's environment before the Stepper gets it
	// (Run times the steps for its metrics).
	WrapEnv func(envs.Env) envs.Env
	// OnReject and OnInvalidUTF8 receive the source's bad rows with
	// source.on_bad_row: skip, and the fields it repaired.
	OnReject      func(sources.Reject) error
	OnInvalidUTF8 func(where string)
	// SourcePath returns the local path of source.path (Run downloads an
	// s3:// one into its staging directory). nil: Build downloads an
	// s3:// source.path into a temporary directory it removes on Close.
	SourcePath func(ctx context.Context) (string, error)
}

// Built are the components of a run, built from its config in one place:
// the inference client, the generate stage, the environments and their
// Stepper, the template, the source and the repeat expander. Run builds
// its graph of them and Validate renders its first requests with them, so
// that what validate shows is what a run sends. A long-lived caller
// builds them once and closes them when done.
type Built struct {
	cfg   *config.Config
	opts  Options
	hooks Hooks
	// Client is the inference client: Options.Client, the simulator of
	// sim:// endpoints, or the HTTP client of the endpoints, wrapped by
	// the structured-output check (structured.Wrap).
	Client inference.Client
	// Generator is the generate stage, checked against the endpoints.
	Generator *generate.Generator
	// Envs are the environments by route (one, under env.name, without
	// routes), wrapped by Hooks.WrapEnv; Stepper steps rollouts on them.
	Envs    map[string]envs.Env
	Stepper *envstep.Stepper
	// Template renders the rows' prompts; Expander expands a task into
	// its group's rollouts.
	Template *template.Template
	Expander *repeat.Expander
	// Source reads the input rows; SourcePath is the local path it reads.
	Source     sources.Reader
	SourcePath string

	// http is the config's HTTP client (nil for the simulator or an
	// embedder's client); hosted are the decorators and the Batch API
	// client around it.
	http    *openai.HTTPClient
	hosted  hosted
	closers []func() error
}

// Build checks cfg (Check) and builds its components in order: the
// inference client (the endpoints checked: openai.Preflight and, with
// generate.api tokens, the generate stage's Check), the environments, the
// template, the source and the expander. On an error what was built is
// closed. The caller closes the result.
func Build(ctx context.Context, cfg *config.Config, opts BuildOptions) (*Built, error) {
	if err := Check(cfg, opts.Options); err != nil {
		return nil, err
	}
	return build(ctx, cfg, opts)
}

// build is Build without the config check (Run checks before it resolves
// the shard).
func build(ctx context.Context, cfg *config.Config, opts BuildOptions) (*Built, error) {
	b := newBuilt(cfg, opts)
	err := b.buildAll(ctx)
	if err != nil {
		return nil, errors.Join(err, b.Close())
	}
	return b, nil
}

func newBuilt(cfg *config.Config, opts BuildOptions) *Built {
	return &Built{cfg: cfg, opts: opts.Options, hooks: opts.Hooks}
}

func (b *Built) buildAll(ctx context.Context) error {
	if err := b.openClient(); err != nil {
		return err
	}
	// Fail fast: a broken endpoint set-up stops the run before any data
	// is read, instead of filling the output with error rows.
	if err := b.preflight(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrEndpoint, err)
	}
	if err := b.openBatch(ctx); err != nil {
		return err
	}
	if err := b.decorate(); err != nil {
		return err
	}
	// A server that cannot do what generate.api needs fails here, at
	// start-up, rather than in every rollout.
	if err := b.newGenerator(ctx); err != nil {
		return err
	}
	if err := b.startEnvs(nil); err != nil {
		return err
	}
	if err := b.newTemplate(); err != nil {
		return err
	}
	if err := b.openSource(ctx); err != nil {
		return err
	}
	b.newExpander()
	return nil
}

// Close closes what Build started, in reverse order: the source, the
// environments (an embedder's Options.Env is its own to close), the
// client. It returns every error met.
func (b *Built) Close() error {
	var errs []error
	for i := len(b.closers) - 1; i >= 0; i-- {
		errs = append(errs, b.closers[i]())
	}
	b.closers = nil
	return errors.Join(errs...)
}

// openClient sets Client: Options.Client, the simulator of sim://
// endpoints, or the HTTP client of the endpoints (not contacted yet),
// wrapped by the structured-output check (inference/structured).
func (b *Built) openClient() error {
	cfg := b.cfg
	switch {
	case b.opts.Client != nil:
		b.Client = b.opts.Client
	case strings.HasPrefix(cfg.Generate.Endpoints[0], "sim://"):
		s := newSim(cfg)
		b.Client = s
		b.closers = append(b.closers, func() error { s.Close(); return nil })
	default:
		c, err := openai.NewHTTP(cfg.Generate.Config, b.httpOptions())
		if err != nil {
			return err
		}
		b.Client, b.http = c, c
		b.closers = append(b.closers, func() error { c.Close(); return nil })
	}
	return nil
}

// httpOptions are the HTTP client's options: the key from
// generate.api_key_env, and the hooks.
func (b *Built) httpOptions() openai.HTTPOptions {
	key := ""
	if b.cfg.Generate.APIKeyEnv != "" {
		key = os.Getenv(b.cfg.Generate.APIKeyEnv)
	}
	return openai.HTTPOptions{APIKey: key, OnBreak: b.hooks.OnBreak, OnAttempt: b.hooks.OnAttempt, OnResponse: b.limiterHook(),
		// The OpenAI Batch output holds each reply's body as it came.
		KeepBody: b.cfg.Output.OpenAIBatch}
}

// httpEndpoints reports whether the client is the config's HTTP client
// (not an embedder's, not the simulator).
func (b *Built) httpEndpoints() bool {
	return b.opts.Client == nil && !strings.HasPrefix(b.cfg.Generate.Endpoints[0], "sim://")
}

// preflight checks each HTTP endpoint: reachable, the key accepted, the
// model served (openai.Preflight). The simulator and an embedder's client
// need none.
func (b *Built) preflight(ctx context.Context) error {
	if !b.httpEndpoints() {
		return nil
	}
	return openai.Preflight(ctx, b.cfg.Generate.Config, b.httpOptions())
}

// generatorOptions are the generate stage's options, from the generate,
// prompt, env (each route's max_seq_len and step-wise prompting) and
// output (output.steps) sections.
func generatorOptions(cfg *config.Config) (generate.Options, error) {
	stepPrompt, err := stepPrompts(cfg)
	if err != nil {
		return generate.Options{}, err
	}
	return generate.Options{
		Model: cfg.Generate.Model, Params: cfg.Generate.Params, API: cfg.Generate.API,
		MaxSeqLen: cfg.Env.MaxSeqLen, MaxSeqLenOf: cfg.Env.SeqLenOf(),
		PromptMaxTokens: cfg.Prompt.MaxTokens, PromptTruncation: cfg.Prompt.Truncation,
		ObservationTokens: cfg.Env.ObservationTokens,
		StepPrompt:        stepPrompt, RecordSteps: cfg.Output.Steps,
	}, nil
}

// newGenerator sets Generator and checks the server can do what
// generate.api needs (generate.Generator.Check).
func (b *Built) newGenerator(ctx context.Context) error {
	gopts, err := generatorOptions(b.cfg)
	if err != nil {
		return err
	}
	gopts.Policy = b.opts.continuous().Policy
	gen, err := generate.New(b.Client, gopts)
	if err != nil {
		return err
	}
	if err := gen.Check(ctx); err != nil {
		return err
	}
	b.Generator = gen
	return nil
}

// startEnvs starts every route's environment (Options.Env for each, when
// set) and sets Envs and Stepper. started, when set, hears of each route
// as it starts or fails to. On an error the environments started are
// closed by Close.
func (b *Built) startEnvs(started func(route string, err error)) error {
	b.Envs = map[string]envs.Env{}
	for _, rs := range b.cfg.Env.RouteSpecs() {
		env := b.opts.Env
		if env == nil {
			var err error
			env, err = envs.New(rs.Config.Name, routeOptions(rs))
			if started != nil {
				started(rs.Route, err)
			}
			if err != nil {
				return err
			}
			if c, ok := env.(io.Closer); ok {
				route := rs.Route
				b.closers = append(b.closers, func() error {
					if err := c.Close(); err != nil {
						return fmt.Errorf("env %s: closing: %w", route, err)
					}
					return nil
				})
			}
		}
		if b.hooks.WrapEnv != nil {
			env = b.hooks.WrapEnv(env)
		}
		b.Envs[rs.Route] = env
	}
	b.Stepper = envstep.FromConfig(&b.cfg.Env, func(route string) envs.Env { return b.Envs[route] })
	return nil
}

// routeOptions are the options the config gives one of its environments.
func routeOptions(rs envstep.RouteSpec) envs.Options {
	return envs.Options{Section: rs.Section, Values: rs.Config.Options}
}

// newTemplate sets Template from the prompt section.
func (b *Built) newTemplate() error {
	t, err := template.New(b.cfg.Prompt)
	if err != nil {
		return err
	}
	b.Template = t
	return nil
}

// openSource sets Source and SourcePath: the input, downloaded first when
// source.path is an s3:// URL.
func (b *Built) openSource(ctx context.Context) error {
	local := b.hooks.SourcePath
	if local == nil {
		local = func(ctx context.Context) (string, error) {
			if !storage.IsURL(b.cfg.Source.Path) {
				return b.cfg.Source.Path, nil
			}
			// An object is read from a temporary download.
			r := &run{cfg: b.cfg}
			b.closers = append(b.closers, func() error { r.cleanup(); return nil })
			return r.localSource(ctx)
		}
	}
	path, err := local(ctx)
	if err != nil {
		return err
	}
	srcCfg := b.cfg.Source
	srcCfg.Path = path
	stderr := b.opts.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	src, err := openSource(ctx, srcCfg, sources.Options{OnReject: b.hooks.OnReject, OnInvalidUTF8: b.hooks.OnInvalidUTF8}, stderr)
	if err != nil {
		return err
	}
	b.Source, b.SourcePath = src, path
	b.closers = append(b.closers, src.Close)
	return nil
}

// newExpander sets Expander from the repeat section.
func (b *Built) newExpander() {
	cfg := b.cfg
	b.Expander = repeat.New(cfg.Repeat, cfg.Run.ID, cfg.Env.Name, cfg.Generate.Model).WithParams(cfg.Generate.Params)
}

// newSim is the in-process simulator behind sim:// endpoints.
func newSim(cfg *config.Config) *sim.Server {
	so := sim.OptionsFrom(cfg.Generate.Sim)
	if cfg.Repeat.SeedMode == "offset" {
		// Lets the simulator tell groups apart for generate.sim.keep.
		so.GroupSize, so.BaseSeed = cfg.Repeat.N, cfg.Repeat.Seed
	}
	return sim.New(so)
}

// stepPrompts builds generate.Options.StepPrompt from the routes'
// env.history_length (nil when no route has it: every request is the
// whole chat). Without routes every rollout takes the env section's.
func stepPrompts(cfg *config.Config) (func(*pipeline.Rollout) ([]pipeline.Message, bool), error) {
	prompts := map[string]*template.StepPrompt{}
	for _, rs := range cfg.Env.RouteSpecs() {
		h := rs.Config.HistoryLength
		if h == nil {
			continue
		}
		p, err := template.NewStepPrompt(*h, rs.Config.StepTemplate, rs.Config.HistoryTemplate)
		if err != nil {
			return nil, err
		}
		prompts[rs.Route] = p
	}
	if len(prompts) == 0 {
		return nil, nil
	}
	single := prompts[cfg.Env.Name]
	routed := cfg.Env.Routed()
	return func(r *pipeline.Rollout) ([]pipeline.Message, bool) {
		p := single
		if routed {
			p = prompts[r.Env]
		}
		if p == nil {
			return nil, false
		}
		return p.Messages(r), true
	}, nil
}
