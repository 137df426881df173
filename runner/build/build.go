package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/gateway"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sources"
	"github.com/trajflow/trajflow/stages/envstep"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/repeat"
	"github.com/trajflow/trajflow/stages/template"
)

// Hooks let the caller of the build steps take part in them and observe
// the components built; every one may be nil.
type Hooks struct {
	// Output is the output step: Run makes its output directory there
	// (the shard's directory, the lock, the committer); Validate checks
	// an s3:// output.dir's bucket and writes nothing.
	Output func(ctx context.Context) error
	// OnBreak is called when the HTTP client's circuit breaker opens (Run
	// stops the run).
	OnBreak func(error)
	// OnAttempt observes each HTTP attempt (Run's Prometheus metrics).
	OnAttempt func(endpoint string, took time.Duration, err *inference.Error, retrying bool)
	// WrapEnv wraps each route's environment before the Stepper gets it
	// (Run times the steps for its metrics).
	WrapEnv func(envs.Env) envs.Env
	// OnEnvStart hears of each route's environment as it starts or fails
	// to (Validate's report).
	OnEnvStart func(route string, err error)
	// OnReject and OnInvalidUTF8 receive the source's bad rows with
	// source.on_bad_row: skip, and the fields it repaired.
	OnReject      func(sources.Reject) error
	OnInvalidUTF8 func(where string)
	// SourcePath returns the local path of source.path (Run downloads an
	// s3:// one into its staging directory). nil: an s3:// source.path is
	// downloaded into a temporary directory removed on Close.
	SourcePath func(ctx context.Context) (string, error)
}

// Components are a run's components, built from its config in one place
// by the build steps: the inference client, the generate stage, the
// environments and their Stepper, the template, the source and the repeat
// expander. Run builds its graph of them and Validate renders its first
// requests with them, so that what validate shows is what a run sends.
type Components struct {
	cfg   *config.Config
	opts  Options
	hooks Hooks
	// Red removes the config's secrets from errors and logs; Stderr is
	// Options.Stderr writing through it.
	Red    *config.Redactor
	Stderr io.Writer
	// Client is the inference client: Options.Client, the simulator of
	// sim:// endpoints, or the HTTP client of the endpoints, wrapped by
	// the decorators of generate.* (decorate).
	Client inference.Client
	// Generator is the generate stage, checked against the endpoints.
	Generator *generate.Generator
	// Envs are the environments by route (one, under env.name, without
	// routes), wrapped by hooks.WrapEnv; Stepper steps rollouts on them.
	Envs    map[string]envs.Env
	Stepper *envstep.Stepper
	// Gateway is the agent gateway, started when a route's environment
	// is an agent (envs.Agent); nil otherwise, and in validate's dry walk.
	Gateway *gateway.Server
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

// Options are the settings of the build steps that are not part of the
// config.
type Options struct {
	// Client, when set, is the inference client: the config's endpoints
	// are not contacted. Env, when set, is every route's environment.
	Client inference.Client
	Env    envs.Env
	// Stderr receives warnings; nil discards them.
	Stderr io.Writer
	// LookupEnv reads the variables source.shard: auto takes the shard
	// from (default os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// Policy is passed to the generate stage.
	Policy *generate.Policy
	// Checked skips the config step's check: the caller checked.
	Checked bool
	// Dry is validate's walk: nothing is written (the Batch API is
	// checked, its state not opened; generate.cache is not opened, so a
	// request is sent rather than answered from it).
	Dry bool
}

// ErrEndpoint: the inference endpoints cannot serve the run: the check
// at start-up failed, or the HTTP client's circuit breaker opened.
var ErrEndpoint = errors.New("the inference endpoints cannot serve the run")

// Step is one named step of building a run.
type Step struct {
	Name string
	do   func(c *Components, ctx context.Context) error
	// Wrap, when set, is the error a run wraps the step's error in (the
	// command's exit status); validate reports the error as it is.
	Wrap error
}

// Steps are the steps a run, validate and serve (through the run) walk,
// in this order: the config checked before anything exists; the output
// directory; the inference client, checked (preflight) before any data is
// read, replaced by the Batch API client, and decorated (rate limits,
// the structured-output check, the cache); the generate stage, checked
// against the server (a server that cannot do what generate.api needs
// fails here rather than in every rollout); the environments; the
// template; the source; the expander.
var Steps = []Step{
	{Name: "config", do: (*Components).check},
	{Name: "output", do: (*Components).output},
	{Name: "client", do: (*Components).openClient},
	{Name: "preflight", do: (*Components).preflight, Wrap: ErrEndpoint},
	{Name: "batch", do: (*Components).openBatch, Wrap: ErrEndpoint},
	{Name: "decorate", do: (*Components).decorate},
	{Name: "generator", do: (*Components).newGenerator},
	{Name: "envs", do: (*Components).startEnvs},
	{Name: "gateway", do: (*Components).startGateway},
	{Name: "template", do: (*Components).newTemplate},
	{Name: "source", do: (*Components).openSource},
	{Name: "expander", do: (*Components).newExpander},
}

// New prepares the build steps of cfg: nothing is built yet. The
// redactor is made once here; Stderr writes through it.
func New(cfg *config.Config, opts Options, h Hooks) *Components {
	red := cfg.Redactor()
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	opts.Stderr = red.Writer(opts.Stderr)
	return &Components{cfg: cfg, opts: opts, hooks: h, Red: red, Stderr: opts.Stderr}
}

// Walk runs the build steps in order through visit, which runs the step
// (do) and decides what its error means: a run stops at the first
// (RunStep), validate reports it and goes on. What was built is closed by
// Close, also after an error.
func (c *Components) Walk(ctx context.Context, visit func(s Step, do func() error) error) error {
	for _, s := range Steps {
		if err := visit(s, func() error { return s.do(c, ctx) }); err != nil {
			return err
		}
	}
	return nil
}

// RunStep is a run's visit of a build step: the step's error stops the
// walk, wrapped in the step's error class.
func RunStep(s Step, do func() error) error {
	err := do()
	if err != nil && s.Wrap != nil {
		err = fmt.Errorf("%w: %w", s.Wrap, err)
	}
	return err
}

// check is the config step: every problem a run would meet (Check),
// unless the caller checked already (Options.Checked).
func (c *Components) check(context.Context) error {
	if c.opts.Checked {
		return nil
	}
	return Check(c.cfg, c.opts.Env, c.opts.LookupEnv)
}

// Check reports every problem of the config that a run would meet,
// without creating anything: every section's keys, the shard of
// source.shard: auto, the environment's name and options (unless env
// replaces them) and the templates. The error is a
// *config.ValidationError whose lines name where each key was set.
func Check(cfg *config.Config, env envs.Env, lookupEnv func(string) (string, bool)) error {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	var p pipeline.Problems
	p.Section("", cfg.Validate())
	if cfg.Source.Shard.Auto {
		if _, err := cfg.Source.Shard.Resolve(lookupEnv); err != nil {
			p.Section("source", err)
		}
	}
	if env == nil {
		// Every route's environment and options, before anything starts.
		for _, rs := range cfg.Env.RouteSpecs() {
			p.Section("", envs.Validate(rs.Config.Name, routeOptions(rs)))
		}
	}
	return cfg.Locate(p.Err())
}

// output is the output step (hooks.Output).
func (c *Components) output(ctx context.Context) error {
	if c.hooks.Output == nil {
		return nil
	}
	return c.hooks.Output(ctx)
}

// Close closes what the build steps started, in reverse order: the source, the
// environments (an embedder's Options.Env is its own to close), the
// client. It returns every error met.
func (b *Components) Close() error {
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
func (b *Components) openClient(context.Context) error {
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
func (b *Components) httpOptions() openai.HTTPOptions {
	key := ""
	if b.cfg.Generate.APIKeyEnv != "" {
		key = os.Getenv(b.cfg.Generate.APIKeyEnv)
	}
	return openai.HTTPOptions{APIKey: key, OnBreak: b.hooks.OnBreak, OnAttempt: b.hooks.OnAttempt, OnResponse: b.limiterHook(),
		// The rate limiter sends a 429 again once it has room.
		ReturnRateLimited: b.cfg.Generate.RateLimit.Enabled(),
		// The OpenAI Batch output holds each reply's body as it came.
		KeepBody: b.cfg.Output.OpenAIBatch,
		// The context length tells a prompt Ollama cut silently
		// (generate.Generator's check after each chat answer).
		LearnContext: true,
		SilenceAfter: b.cfg.Generate.SilenceAfter.D(),
		// An endpoint taken out (failing or silent) and back in is said.
		HealthLogf: func(format string, args ...any) { fmt.Fprintf(b.Stderr, "trajflow: "+format+"\n", args...) }}
}

// HTTPEndpoints reports whether the client is the config's HTTP client
// (not an embedder's, not the simulator).
func (b *Components) HTTPEndpoints() bool {
	return b.opts.Client == nil && !strings.HasPrefix(b.cfg.Generate.Endpoints[0], "sim://")
}

// preflight checks each HTTP endpoint: reachable, the key accepted, the
// model served (openai.Preflight). The simulator and an embedder's client
// need none.
func (b *Components) preflight(ctx context.Context) error {
	if !b.HTTPEndpoints() {
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
		MaxSeqLenOf:     cfg.Env.SeqLenOf(),
		PromptMaxTokens: cfg.Prompt.MaxTokens, PromptTruncation: cfg.Prompt.Truncation,
		ObservationTokens: cfg.Env.ObservationTokens,
		StepPrompt:        stepPrompt, RecordSteps: cfg.Output.Steps,
		RoutedExperts: cfg.Generate.RoutedExperts, RoutedExpertsLayers: cfg.Generate.RoutedExpertsLayers,
	}, nil
}

// newGenerator sets Generator and checks the server can do what
// generate.api needs (generate.Generator.Check).
func (b *Components) newGenerator(ctx context.Context) error {
	gopts, err := generatorOptions(b.cfg)
	if err != nil {
		return err
	}
	gopts.Policy = b.opts.Policy
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
// set) and sets Envs and Stepper. hooks.OnEnvStart, when set, hears of
// each route as it starts or fails to. On an error the environments started are
// closed by Close.
func (b *Components) startEnvs(context.Context) error {
	started := b.hooks.OnEnvStart
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

// startGateway starts the agent gateway (the gateway section) when a
// route's environment is an agent: its agents call the model there. The
// dry walk of validate only checks that gateway.addr can be listened on.
func (b *Components) startGateway(context.Context) error {
	agents := false
	for _, route := range sortedRoutes(b.Envs) {
		env := b.Envs[route]
		if _, ok := env.(envs.Agent); ok {
			agents = true
		}
		if f, ok := env.(envs.FixedGateway); ok && f.FixedGateway() {
			if _, port, err := net.SplitHostPort(b.cfg.Gateway.Addr); err == nil && port == "0" {
				return fmt.Errorf("gateway.addr: %q takes a free port, but env %s's agent servers are configured with their model server's address before the run: give the gateway a fixed port (e.g. 127.0.0.1:8400) and name http://THAT/v1 as their model server", b.cfg.Gateway.Addr, route)
			}
		}
	}
	if !agents {
		return nil
	}
	g := gateway.New(gateway.Options{Addr: b.cfg.Gateway.Addr, Model: b.cfg.Generate.Model, MaxBody: b.cfg.Gateway.MaxBody})
	if err := g.Start(); err != nil {
		return fmt.Errorf("gateway.addr: %w", err)
	}
	if b.opts.Dry {
		return g.Close(context.Background())
	}
	b.Gateway = g
	b.closers = append(b.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return g.Close(ctx)
	})
	return nil
}

// routeOptions are the options the config gives one of its environments.
func routeOptions(rs envstep.RouteSpec) envs.Options {
	return envs.Options{Section: rs.Section, Values: rs.Config.Options}
}

// newTemplate sets Template from the prompt section.
func (b *Components) newTemplate(context.Context) error {
	t, err := template.New(b.cfg.Prompt)
	if err != nil {
		return err
	}
	b.Template = t
	return nil
}

// openSource sets Source and SourcePath: the input, downloaded first when
// source.path is an s3:// URL.
func (b *Components) openSource(ctx context.Context) error {
	local := b.hooks.SourcePath
	if local == nil {
		// An object is read from a temporary download.
		local = func(ctx context.Context) (string, error) {
			return FetchSource(ctx, b.cfg.Source.Path, func() (string, error) {
				dir, err := os.MkdirTemp("", "trajflow-staging-")
				if err == nil {
					b.closers = append(b.closers, func() error { _ = os.RemoveAll(dir); return nil }) // best effort: a temporary directory
				}
				return dir, err
			})
		}
	}
	path, err := local(ctx)
	if err != nil {
		return err
	}
	srcCfg := b.cfg.Source
	srcCfg.Path = path
	src, err := openSource(ctx, srcCfg, sources.Options{OnReject: b.hooks.OnReject, OnInvalidUTF8: b.hooks.OnInvalidUTF8}, b.opts.Stderr)
	if err != nil {
		return err
	}
	b.Source, b.SourcePath = src, path
	b.closers = append(b.closers, src.Close)
	return nil
}

// newExpander sets Expander from the repeat section.
func (b *Components) newExpander(context.Context) error {
	cfg := b.cfg
	b.Expander = repeat.New(cfg.Repeat, cfg.Run.ID, cfg.Env.Name, cfg.Generate.Model).WithParams(cfg.Generate.Params)
	return nil
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

// sortedRoutes are the route names of m, sorted.
func sortedRoutes(m map[string]envs.Env) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
