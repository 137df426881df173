package config

import (
	"errors"
	"path/filepath"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/sim"
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
	Run      Run             `yaml:"run"`
	Source   sources.Config  `yaml:"source"`
	Prompt   template.Config `yaml:"prompt"`
	Repeat   repeat.Config   `yaml:"repeat"`
	Generate Generate        `yaml:"generate"`
	Env      envstep.Config  `yaml:"env"`
	Groups   groups.Config   `yaml:"groups"`
	Output   Output          `yaml:"output"`

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
	// ID names the run in the output's run_id column. Default: the output
	// directory's base name.
	ID string `yaml:"id"`
	// Progress is the interval of the progress line on stderr (default
	// 5s); 0 turns it off, as --quiet does.
	Progress Duration `yaml:"progress"`
	// OnSignal is what a stop (SIGINT, SIGTERM, SIGHUP, or a fatal error)
	// does with the rollouts in flight: cancel (default) or drain.
	OnSignal string `yaml:"on_signal"`
	// Grace bounds a stop, from the signal to the exit. Default 30s.
	Grace Duration `yaml:"grace"`
	// MaxErrorRate is the largest share of error rollouts a run may have;
	// beyond it the run stops and fails. Default 0.5; 1 turns it off.
	MaxErrorRate *float64 `yaml:"max_error_rate"`
	// ResumeErrors is what a resumed run does with groups that failed
	// before: redo (default) or keep.
	ResumeErrors string `yaml:"resume_errors"`
	// MetricsAddr, when set (host:port), serves Prometheus metrics at
	// http://MetricsAddr/metrics while the run goes.
	MetricsAddr string `yaml:"metrics_addr"`
}

// Generate is the generate section: the inference contract's keys and the
// simulator behind sim:// endpoints.
type Generate struct {
	inference.Config `yaml:",inline"`
	// Sim configures the built-in simulator behind sim:// endpoints.
	Sim sim.Config `yaml:"sim"`
}

// Output is the output section: where rows go, and the collate stage's
// and the Parquet sink's own keys.
type Output struct {
	Dir     string         `yaml:"dir"`
	Collate collate.Config `yaml:",inline"`
	Parquet parquet.Config `yaml:",inline"`
	// Filtered writes dropped groups to the filtered directory.
	Filtered bool `yaml:"filtered"`
	// JSONL also writes kept rows as NeMo Gym-shaped JSON lines, one file
	// per run under the jsonl directory.
	JSONL bool `yaml:"jsonl"`
	// ArrowStream also streams kept record batches as an Arrow IPC stream
	// to this file ("-": standard output) while the run goes.
	ArrowStream string `yaml:"arrow_stream"`
	// Images is how rows store data-URL images: reference (default: the
	// bytes once under OUTPUT/images, the row holding "sha256:HEX") or
	// inline (the data URL in the row's messages).
	Images string `yaml:"images"`
	// Steps also writes one row per step of the kept trajectories to the
	// steps directory, committed with their trajectories' part files.
	Steps bool `yaml:"steps"`
}

// SetDefaults fills every key left unset.
func (c *Config) SetDefaults() {
	c.Source.SetDefaults()
	c.Prompt.SetDefaults()
	c.Repeat.SetDefaults()
	c.Generate.Config.SetDefaults()
	c.Generate.Sim.SetDefaults()
	c.Env.SetDefaults()
	c.Groups.SetDefaults()
	if c.Output.Dir == "" {
		c.Output.Dir = "out"
	}
	c.Output.Collate.SetDefaults()
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
	c.Run.setDefaults()
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
	if c.Prompt.MaxTokens > 0 && c.Generate.API == "completions" {
		p.Add("prompt.max_tokens", "counts the prompt with the server's chat template (POST /tokenize), which generate.api: completions does not use; use chat or tokens")
	}
	switch c.Prompt.Truncation {
	case template.TruncLeft, template.TruncRight, template.TruncMiddle:
		// Chat mode sends messages, and the server renders them: cut ids
		// cannot be sent, and a cut text renders to other ids.
		if c.Generate.API != "tokens" {
			p.Add("prompt.truncation", "%s sends the cut token ids, which needs generate.api: tokens (generate.api is %q); with chat use truncation: error", c.Prompt.Truncation, c.Generate.API)
		}
	}
	p.Section("env", c.Env.Validate())
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
	return p.Err()
}
