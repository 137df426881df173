package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/internal/stderrlines"
	"github.com/trajflow/trajflow/pipeline"
)

// Name is the environment's registry name.
const Name = "agent"

// Defaults.
const (
	DefaultStderrTail = 4096
	DefaultKillGrace  = 2 * time.Second
	DefaultMaxOutput  = 1 << 20
)

func init() {
	envs.RegisterSpec(Name, envs.Spec{
		New: func(opts envs.Options) (envs.Env, error) {
			c, err := decode(opts)
			if err != nil {
				return nil, err
			}
			return New(c)
		},
		Validate: func(opts envs.Options) error {
			c, err := decode(opts)
			if err != nil {
				return err
			}
			return c.check()
		},
		// How long a killed agent is given, and whether its stderr is
		// echoed, change nothing in the output.
		Operational: []string{"kill_grace", "stderr_passthrough"},
		// Variables handed to the agent often hold keys.
		Secret: []string{"env"},
	})
}

func decode(opts envs.Options) (Config, error) {
	var c Config
	if err := opts.Decode(&c); err != nil {
		return c, err
	}
	c.Section = opts.Section
	return c, nil
}

// Config is the environment's options (the env section's own keys).
type Config struct {
	// Command is the agent's program and its arguments (required), e.g.
	// [node, agent.mjs] or [python3, agent.py]. A program without a slash
	// is looked up in PATH; a relative path with one is taken from Dir.
	Command []string `yaml:"command"`
	// Env holds extra environment variables for the agent, added to
	// trajflow's own environment. The variables trajflow sets for each
	// rollout (OPENAI_BASE_URL, TRAJFLOW_SESSION, ...) may not be set here.
	Env map[string]string `yaml:"env"`
	// Dir is the agent's working directory.
	//
	// Default: trajflow's.
	Dir string `yaml:"dir"`
	// Verify names a registered environment whose Step scores the
	// session's last assistant message (e.g. math); the reward the agent
	// printed or posted is then not used.
	Verify string `yaml:"verify"`
	// VerifyOptions are the options of the Verify environment.
	VerifyOptions map[string]any `yaml:"verify_options"`
	// StderrTail is how many bytes of the end of the agent's stderr an
	// error keeps.
	//
	// Default: `4096`.
	StderrTail int `yaml:"stderr_tail"`
	// KillGrace is how long a stopped agent's process group has between
	// SIGTERM and SIGKILL.
	//
	// Default: `2s`.
	KillGrace pipeline.Duration `yaml:"kill_grace"`
	// MaxOutput is how many bytes of the end of the agent's stdout are
	// kept (only its last line is read).
	//
	// Default: `1048576` (1 MiB).
	MaxOutput int `yaml:"max_output"`
	// StderrPassthrough copies each line of the agent's stderr to
	// trajflow's stderr, prefixed with "[agent SESSION] ".
	//
	// Default: `true`.
	StderrPassthrough *bool `yaml:"stderr_passthrough"`

	// Section names the config section in errors (default "env").
	Section string `yaml:"-"`
	// Stderr receives the passed-through stderr lines (default os.Stderr).
	Stderr io.Writer `yaml:"-"`
}

// reserved are the variables Run sets for each rollout.
var reserved = []string{
	"OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY",
	"TRAJFLOW_SESSION", "TRAJFLOW_REWARD_URL", "TRAJFLOW_TASK_INDEX", "TRAJFLOW_ROLLOUT_INDEX",
	"TRAJFLOW_ATTEMPT", "TRAJFLOW_SEED", "TRAJFLOW_MODEL",
}

// check reports the first problem of c's keys and fills their defaults. It
// starts nothing: it looks the program up and checks the verifier's
// options.
func (c *Config) check() error {
	if c.Section == "" {
		c.Section = "env"
	}
	key := func(k string) string { return c.Section + "." + k }
	if len(c.Command) == 0 || c.Command[0] == "" {
		return &pipeline.KeyError{Key: key("command"), Msg: "required (e.g. [python3, agent.py])"}
	}
	if err := c.checkProgram(); err != nil {
		return &pipeline.KeyError{Key: key("command"), Msg: err.Error()}
	}
	if c.Dir != "" {
		if fi, err := os.Stat(c.Dir); err != nil || !fi.IsDir() {
			return &pipeline.KeyError{Key: key("dir"), Msg: fmt.Sprintf("%q is not a directory", c.Dir)}
		}
	}
	envKeys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		envKeys = append(envKeys, k)
	}
	sort.Strings(envKeys)
	for _, k := range envKeys {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return &pipeline.KeyError{Key: key("env"), Msg: fmt.Sprintf("bad variable name %q", k)}
		}
		for _, r := range reserved {
			if k == r {
				return &pipeline.KeyError{Key: key("env." + k), Msg: "set by trajflow for each rollout; leave it out"}
			}
		}
	}
	if c.StderrTail < 0 {
		return &pipeline.KeyError{Key: key("stderr_tail"), Msg: fmt.Sprintf("must not be negative, got %d", c.StderrTail)}
	}
	if c.StderrTail == 0 {
		c.StderrTail = DefaultStderrTail
	}
	if c.KillGrace < 0 {
		return &pipeline.KeyError{Key: key("kill_grace"), Msg: fmt.Sprintf("must not be negative, got %s", c.KillGrace.D())}
	}
	if c.KillGrace == 0 {
		c.KillGrace = pipeline.Duration(DefaultKillGrace)
	}
	if c.MaxOutput < 0 {
		return &pipeline.KeyError{Key: key("max_output"), Msg: fmt.Sprintf("must not be negative, got %d", c.MaxOutput)}
	}
	if c.MaxOutput == 0 {
		c.MaxOutput = DefaultMaxOutput
	}
	if c.StderrPassthrough == nil {
		on := true
		c.StderrPassthrough = &on
	}
	if c.Verify == "" {
		if len(c.VerifyOptions) > 0 {
			return &pipeline.KeyError{Key: key("verify_options"), Msg: "set without env.verify"}
		}
		return nil
	}
	if c.Verify == Name {
		return &pipeline.KeyError{Key: key("verify"), Msg: "the agent environment cannot verify itself; name an environment that scores an answer (e.g. math)"}
	}
	if _, ok := envs.Lookup(c.Verify); !ok {
		return &pipeline.KeyError{Key: key("verify"), Msg: fmt.Sprintf("unknown environment %q (have %s)", c.Verify, strings.Join(envs.Names(), ", "))}
	}
	return envs.Validate(c.Verify, c.verifyOptions())
}

func (c *Config) verifyOptions() envs.Options {
	return envs.Options{Section: c.Section + ".verify_options", Values: c.VerifyOptions}
}

// checkProgram finds the program the way Run starts it.
func (c *Config) checkProgram() error {
	prog := c.Command[0]
	if !strings.Contains(prog, "/") {
		if _, err := exec.LookPath(prog); err != nil {
			return fmt.Errorf("program %q not found in PATH", prog)
		}
		return nil
	}
	path := prog
	if !filepath.IsAbs(path) && c.Dir != "" {
		path = filepath.Join(c.Dir, path)
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		where := ""
		if path != prog {
			where = fmt.Sprintf(" (%s, from env.dir)", path)
		}
		return fmt.Errorf("program %q%s: %v", prog, where, errors.Unwrap(err))
	case fi.IsDir():
		return fmt.Errorf("program %q is a directory", prog)
	case fi.Mode()&0o111 == 0:
		return fmt.Errorf("program %q is not executable", prog)
	}
	return nil
}

// Env runs an agent process per rollout. It implements envs.Agent and
// io.Closer.
type Env struct {
	cfg      Config
	verifier envs.Env
	stderr   *stderrlines.Sink
}

var (
	_ envs.Agent = (*Env)(nil)
	_ io.Closer  = (*Env)(nil)
)

// New validates c and builds the environment (and its verifier); it
// starts no process.
func New(c Config) (*Env, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	e := &Env{cfg: c, stderr: stderrlines.NewSink(c.Stderr)}
	if c.Verify != "" {
		v, err := envs.New(c.Verify, c.verifyOptions())
		if err != nil {
			return nil, err
		}
		e.verifier = v
	}
	return e, nil
}

// Reset implements envs.Env: the agent writes its own prompts.
func (e *Env) Reset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{}, nil
}

// ErrStep is Step's error: the loop drives an agent environment with Run.
var ErrStep = errors.New("agent env: Step is not called: the agent environment is driven by its agent (Run)")

// Step implements envs.Env; it is never called by the loop.
func (e *Env) Step(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	return nil, ErrStep
}

// Close closes the verifier, when it is an io.Closer.
func (e *Env) Close() error {
	if c, ok := e.verifier.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
