package config

import (
	"errors"
	"path/filepath"
	"time"

	"github.com/trajflow/trajflow/gateway"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/ratelimit"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/inference/structured"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/sources"
	"github.com/trajflow/trajflow/stages/collate"
	"github.com/trajflow/trajflow/stages/envstep"
	"github.com/trajflow/trajflow/stages/groups"
	"github.com/trajflow/trajflow/stages/repeat"
	"github.com/trajflow/trajflow/stages/template"
	"github.com/trajflow/trajflow/storage"
)

// Config is one run's configuration: one section per component, each the
// component's own Config.
type Config struct {
	// Run holds the run-wide settings: the run's name, progress, stops,
	// the error budget, resume and metrics.
	Run Run `yaml:"run"`
	// Source says where tasks come from and which of them a run reads.
	// Rows are NeMo Gym rows (responses_create_params.input holding
	// messages, the other fields kept for the environment) or plain rows
	// with fields; see docs/sources.md.
	Source sources.Config `yaml:"source"`
	// Prompt renders each row's messages from its fields. Omit the section
	// when rows carry their own messages; a placeholder whose field a row
	// lacks is an error naming the row and the field. See docs/prompts.md.
	Prompt template.Config `yaml:"prompt"`
	// Repeat expands each task into a group of rollouts and seeds them.
	Repeat repeat.Config `yaml:"repeat"`
	// Generate says which model, on which OpenAI-compatible servers (or
	// the built-in simulator), with which request parameters, and how hard
	// to retry. See docs/inference.md.
	Generate Generate `yaml:"generate"`
	// Env chooses the environment that steps the trajectories (or one per
	// row, with routes), its own options and the limits of a trajectory.
	// See docs/environments.md and docs/external-envs.md.
	Env envstep.Config `yaml:"env"`
	// Groups holds the group statistics, the keep rule and dynamic
	// sampling (DAPO): see docs/dynamic-sampling.md. Group statistics use
	// the members that resolved ok; std is the sample standard deviation.
	// Under any rule but all, a group with a failed member is dropped with
	// reason error.
	Groups groups.Config `yaml:"groups"`
	// Output says where and how rows are written: the output directory,
	// record batches, Parquet part files and the optional extra outputs.
	// The layout of the directory is in docs/output.md, its columns in
	// SCHEMA.md, the Parquet sink in docs/parquet-sink.md and the interop
	// sinks in docs/sinks-interop.md.
	Output Output `yaml:"output"`
	// Serve holds the settings of trajflow serve, the rollout service
	// that hands training steps to trainers over HTTP (docs/serve.md).
	Serve Serve `yaml:"serve"`
	// Gateway is where the agent gateway listens while a run with an
	// agent environment (env.name: agent) goes: agents' SDKs call the
	// model there (docs/agents.md).
	Gateway gateway.Config `yaml:"gateway"`

	// File is the path the config was read from ("" for an inline config).
	File string `yaml:"-"`
	// where maps each key the config set to where it was set.
	where map[string]string
	// unknown are the keys the config set that no section has.
	unknown []error
	// secretKey keys the hash that stands for secrets in the fingerprint.
	secretKey []byte
}

// Duration is pipeline.Duration, the type of every time key.
type Duration = pipeline.Duration

// Run holds run-wide settings.
type Run struct {
	// ID names the run in the output's run_id column.
	//
	// Default: the output directory's name.
	ID string `yaml:"id"`
	// Progress is the interval of the progress report on stderr: a live
	// multi-line view on a terminal, a plain line otherwise
	// (docs/observability.md); 0 turns it off, as --quiet does (default 5s when left out).
	Progress Duration `yaml:"progress"`
	// OnSignal is what a stop (SIGINT, SIGTERM, SIGHUP, or a fatal error)
	// does with the rollouts in flight: cancel them at once, or drain them
	// (let them finish until grace minus min(5s, grace/4)); either way
	// admission stops and the finished groups are committed
	// (docs/reliability.md).
	OnSignal string `yaml:"on_signal"`
	// Grace bounds a stop, from the signal to the exit: what is not
	// committed by then is dropped.
	Grace Duration `yaml:"grace"`
	// MaxErrorRate is the largest share of error rollouts (among ok, error
	// and filtered) a run may have; it is checked from 100 resolved
	// rollouts on and at the end, and beyond it the run stops and exits 4.
	// 1 turns it off.
	MaxErrorRate *float64 `yaml:"max_error_rate"`
	// ResumeErrors is what a resumed run does with the groups that failed
	// before (in errors/): redo them, or keep them, counting them as done
	// (the run command's --keep-errors).
	ResumeErrors string `yaml:"resume_errors"`
	// MetricsAddr, when set (host:port), serves Prometheus metrics
	// (trajflow_*) at http://host:port/metrics while the run goes
	// (docs/observability.md).
	MetricsAddr string `yaml:"metrics_addr"`
}

// Generate is the generate section: the inference contract's keys and the
// simulator behind sim:// endpoints.
type Generate struct {
	inference.Config `yaml:",inline"`
	// Structured output: the replies checked against
	// params.response_format's JSON schema.
	Structured structured.Config `yaml:",inline"`
	// Price is what the tokens cost, for the cost the summary, metrics.json,
	// stats, Prometheus, the report and the progress line show.
	Price inference.Price `yaml:"price"`
	// Sim configures the built-in simulator behind sim:// endpoints; see
	// docs/sim.md.
	Sim sim.Config `yaml:"sim"`
	// RateLimit keeps the run under a hosted API account's limits, for the
	// whole fleet: requests wait for room, and every response's
	// x-ratelimit-* and Retry-After headers tighten the limiter (see
	// docs/hosted-apis.md).
	RateLimit ratelimit.Config `yaml:"rate_limit"`
	// Cache is a directory of responses kept across runs, keyed by exactly
	// what each request sends (its body, the model, the API, the sample):
	// a rerun whose requests are unchanged sends none and writes the same
	// rows. A local directory only (not s3://); several runs may share
	// it. See docs/hosted-apis.md.
	//
	// Default: none (no cache).
	Cache string `yaml:"cache"`
	// CacheMaxBytes bounds the cache directory: when a new response takes
	// it over, the entries used least recently go first (0: no bound).
	CacheMaxBytes int64 `yaml:"cache_max_bytes"`
	// Batch says how generate.api: batch cuts requests into batches
	// (within the provider's limits) and how often it polls them. See
	// docs/hosted-apis.md.
	Batch openai.BatchConfig `yaml:"batch"`
}

// Output is the output section: where rows go, and the collate stage's
// and the Parquet sink's own keys.
type Output struct {
	// Dir is the output directory, or s3://bucket/prefix in S3-compatible
	// object storage (docs/storage.md): each file is uploaded whole when it
	// commits; resume, stats, merge and report take the same URL.
	Dir     string         `yaml:"dir"`
	Collate collate.Config `yaml:",inline"`
	Parquet parquet.Config `yaml:",inline"`
	// Filtered also writes the dropped groups (with filter_reason) to
	// filtered/.
	Filtered bool `yaml:"filtered"`
	// JSONL also writes the rows as JSON lines in NeMo Gym's rollout shape
	// (docs/output.md): jsonl/rollouts-DIR-NNNNN.jsonl beside each Parquet
	// part DIR/part-NNNNN.parquet, staged as the part is written and
	// renamed into place with its commit, so that after any crash and
	// resume the files hold exactly one line per committed row. Each
	// line's response.created_at is the rollout's start (Unix seconds).
	// Turned on at a resume, it writes lines for the parts committed from
	// then on.
	JSONL bool `yaml:"jsonl"`
	// JSONLRows are the rows output.jsonl writes: kept (the rows of data/)
	// or all (also those of filtered/, surplus/ and errors/, as far as
	// they are written: filtered/ needs output.filtered). Each line's
	// trajflow.status says what became of its row.
	//
	// Default: kept.
	JSONLRows string `yaml:"jsonl_rows" json:",omitempty"`
	// ArrowStream also streams the kept record batches as an Arrow IPC
	// stream to this file ("-": standard output) while the run goes; a
	// local path only.
	ArrowStream string `yaml:"arrow_stream"`
	// Images is how rows store data-URL images (OpenAI image_url parts of
	// rows and observations, docs/sources.md): reference writes each
	// distinct image once to OUTPUT/images/HEX.EXT and the row holds
	// "sha256:HEX"; inline keeps the data URL in the row (see SCHEMA.md on
	// images).
	Images string `yaml:"images"`
	// Steps also writes one row per step of the kept trajectories to
	// steps/part-NNNNN.parquet, committed with their data/ file: the step's
	// prompt and response ids, rewards, action validity, anchor group and
	// GiGPO statistics (SCHEMA.md, Step rows).
	Steps bool `yaml:"steps"`
	// OpenAIBatch also writes OpenAI's Batch output and error files:
	// openai_batch/output-DIR-NNNNN.jsonl and errors-DIR-NNNNN.jsonl beside
	// each Parquet part DIR/part-NNNNN.parquet (data, filtered, surplus,
	// errors), committed with it, one line per row: {"id", "custom_id",
	// "response": {"status_code", "request_id", "body"}, "error": null}
	// with the server's reply as body, or "error": {"code", "message"} for
	// a row that failed. Each row's custom_id is its input line's
	// (source.format: openai_batch), else its traj_id. It needs
	// run.resume_errors: keep (the default with it), so that every request
	// has exactly one line across resumes. See docs/offline.md.
	OpenAIBatch bool `yaml:"openai_batch"`
}

// The values of output.jsonl_rows.
const (
	JSONLKept = "kept"
	JSONLAll  = "all"
)

// SetDefaults fills every key left unset.
func (c *Config) SetDefaults() {
	c.Source.SetDefaults()
	c.Prompt.SetDefaults()
	c.Repeat.SetDefaults()
	c.Generate.Config.SetDefaults()
	c.Generate.Sim.SetDefaults()
	c.Generate.Batch.SetDefaults()
	c.Generate.Structured.SetDefaults()
	if c.Source.Format == sources.FormatOpenAIBatch && c.Env.Name == "" && len(c.Env.Routes) == 0 {
		// An OpenAI Batch file holds requests, not tasks: each is one
		// generation, with no environment (envs.None).
		c.Env.Name = "none"
	}
	c.Env.SetDefaults()
	c.Groups.SetDefaults()
	if c.Output.Dir == "" {
		c.Output.Dir = "out"
	}
	c.Output.Collate.SetDefaults()
	if c.Output.JSONLRows == "" {
		c.Output.JSONLRows = JSONLKept
	}
	if c.Output.Images == "" {
		c.Output.Images = "reference"
	}
	c.Output.Parquet.SetDefaults()
	if c.Run.ID == "" {
		c.Run.ID = filepath.Base(filepath.Clean(c.Output.Dir))
	}
	if _, set := c.where["run.progress"]; c.Run.Progress == 0 && !set {
		// Only when left out: a 0 the config wrote turns progress off.
		c.Run.Progress = Duration(5 * time.Second)
	}
	if c.Output.OpenAIBatch && c.Run.ResumeErrors == "" {
		// A failed request has its line in an error file: a resumed run
		// does not send it again.
		c.Run.ResumeErrors = "keep"
	}
	c.Run.setDefaults()
	c.Serve.SetDefaults()
	c.Gateway.SetDefaults()
}

// Validate reports every problem of the config's own keys at once, each
// naming its full key. Environment names and options are checked by
// whoever resolves them (the runner's Check).
func (c *Config) Validate() error {
	var p pipeline.Problems
	p.Section("", errors.Join(c.unknown...))
	p.Section("run", c.Run.validate())
	p.Section("source", c.Source.Validate())
	p.Section("prompt", c.Prompt.Validate())
	p.Section("repeat", c.Repeat.Validate())
	p.Section("generate", c.Generate.Config.Validate())
	p.Section("generate.sim", c.Generate.Sim.Validate())
	c.validateHosted(&p)
	p.Section("generate", c.Generate.Structured.Validate())
	if err := structured.CheckParams(c.Generate.Params); err != nil {
		p.Add("generate.params", "%v", err)
	}
	p.Section("generate.price", c.Generate.Price.Validate())
	if c.Prompt.MaxTokens > 0 && c.Generate.API.Caps().TextPrompt {
		p.Add("prompt.max_tokens", "counts the prompt with the server's chat template (POST /tokenize), which generate.api: completions does not use; use chat or tokens")
	}
	switch c.Prompt.Truncation {
	case template.TruncLeft, template.TruncRight, template.TruncMiddle:
		// Chat mode sends messages, and the server renders them: cut ids
		// cannot be sent, and a cut text renders to other ids.
		if !c.Generate.API.Tokens() {
			p.Add("prompt.truncation", "%s sends the cut token ids, which needs generate.api: tokens or sglang (generate.api is %q); with chat use truncation: error", c.Prompt.Truncation, c.Generate.API)
		}
	}
	p.Section("env", c.Env.Validate())
	if c.Env.ObservationTokens == envstep.ObservationRaw && !c.Generate.API.Tokens() {
		// Chat mode sends messages: the server renders every observation
		// with its template.
		p.Add("env.observation_tokens", "raw tokenises observations without the chat template, which needs generate.api: tokens or sglang (generate.api is %q)", c.Generate.API)
	}
	if !c.Output.Steps {
		// The penalty is charged where verl-agent charges it, to the
		// steps' training scores: without step rows it would do nothing.
		const why = "is charged in the step rows (step_return, episode_advantage), as verl-agent charges it; set output.steps: true"
		if c.Env.InvalidActionPenalty != 0 {
			p.Add("env.invalid_action_penalty", why)
		} else {
			for _, k := range c.Env.RouteKeys() {
				if c.Env.Routes[k].InvalidActionPenalty != 0 {
					p.Add("env.routes."+k+".invalid_action_penalty", why)
				}
			}
		}
	}
	for _, rs := range c.Env.RouteSpecs() {
		if h := rs.Config.HistoryLength; h != nil && *h >= 0 {
			_, err := template.NewStepPrompt(*h, rs.Config.StepTemplate, rs.Config.HistoryTemplate)
			p.Section(rs.Section, err)
		}
	}
	p.Section("groups", c.Groups.Validate())
	if c.Output.Dir == "" {
		p.Add("output.dir", "required")
	} else if storage.IsURL(c.Output.Dir) {
		if _, err := storage.ParseURL(c.Output.Dir); err != nil {
			p.Add("output.dir", "%v", err)
		}
	}
	if storage.IsURL(c.Source.Path) {
		if _, err := storage.ParseURL(c.Source.Path); err != nil {
			p.Add("source.path", "%v", err)
		}
	}
	if storage.IsURL(c.Output.ArrowStream) {
		p.Add("output.arrow_stream", "a local path (object storage is not supported for the Arrow stream)")
	}
	p.Section("output", c.Output.Collate.Validate())
	p.OneOf("output.images", c.Output.Images, "reference", "inline")
	p.Section("output", c.Output.Parquet.Validate())
	p.Section("serve", c.Serve.Validate())
	p.Section("gateway", c.Gateway.Validate())
	switch c.Output.JSONLRows {
	case JSONLKept, JSONLAll:
	default:
		p.Add("output.jsonl_rows", "%q is not %s or %s", c.Output.JSONLRows, JSONLKept, JSONLAll)
	}
	if c.Output.OpenAIBatch && c.Run.ResumeErrors != "keep" {
		p.Add("output.openai_batch", "needs run.resume_errors: keep (a failed request has its line in an error file, and a resumed run that sent it again would give its custom_id a second line); leave run.resume_errors unset")
	}
	if c.Source.Format == sources.FormatOpenAIBatch && c.Generate.API.Tokens() {
		p.Add("source.format", "openai_batch sends each line's body to the url it names (chat or completions), which generate.api: tokens does not; use generate.api: chat")
	}
	return p.Err()
}
