package config

import (
	"net"
	"time"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sources"
	"github.com/trajflow/trajflow/stages/groups"
)

// Defaults of the serve section.
const (
	DefaultServeAddr        = "127.0.0.1:8700"
	DefaultServeLease       = 10 * time.Minute
	DefaultMaxGroupsPerStep = 4096
	DefaultServePauseMode   = "abort"
	DefaultServeCommit      = 500 * time.Millisecond
	DefaultServeBufferSteps = 1
	DefaultServeOnStale     = "requeue"
	// DefaultServePauseTimeout ends a pause no resume ended: a trainer
	// that dies between pause and resume, or restarts and gets a 409,
	// would otherwise leave the fleet paused for good.
	DefaultServePauseTimeout = 30 * time.Minute
	// DefaultServeDriftRatio is drift_ratio's default.
	DefaultServeDriftRatio = 2.0
)

// Serve is the serve section: the settings of `trajflow serve`, the
// rollout service that hands training steps to trainers over HTTP
// (docs/serve.md). A run ignores it.
type Serve struct {
	// Addr is the host:port the service listens on (the command's
	// --addr). Any address but loopback (127.0.0.0/8, [::1], localhost)
	// requires a bearer token (token_env). An IPv6 address goes in
	// brackets, quoted in YAML: "[::1]:8700".
	//
	// Default: 127.0.0.1:8700.
	Addr string `yaml:"addr"`
	// TokenEnv names the environment variable holding the bearer token
	// every request but GET /healthz must carry (Authorization: Bearer
	// TOKEN). Required when addr is not a loopback address; the token
	// itself never appears in a log, a metric or an error.
	TokenEnv string `yaml:"token_env"`
	// Lease is how long a served step stays leased to its caller: a step
	// not acknowledged (POST /v1/steps/N/ack) within it is served again,
	// to the same or another trainer.
	//
	// Default: 10m.
	Lease Duration `yaml:"lease"`
	// MaxGroupsPerStep is the largest groups=K a step may ask for.
	//
	// Default: 4096.
	MaxGroupsPerStep int `yaml:"max_groups_per_step"`
	// PauseMode is what POST /v1/pause does with the requests in flight
	// when the request names no mode: abort them and continue each from
	// its tokens after the resume, or keep them running on the server.
	//
	// Default: abort.
	PauseMode string `yaml:"pause_mode"`
	// PauseTimeout ends a pause (POST /v1/pause) that no POST
	// /v1/resume ended within it, as a resume would, and logs it: the
	// trainer that paused the fleet never came back (it died between
	// pause and resume, or was restarted and got a 409). It counts from
	// the pause's time in the state file, across restarts; the status
	// says when a pause ends so (pause_expires). 0: a pause lasts until a
	// resume.
	//
	// Default: 30m.
	PauseTimeout *Duration `yaml:"pause_timeout"`
	// Eval, when set, runs an evaluation set every few policy versions
	// (docs/serve.md, "Evaluation"), its rows apart from the training
	// steps.
	Eval *ServeEval `yaml:"eval"`
	// DriftRatio is the c of the drift an ack's logprobs measure
	// (docs/serve.md, "Drift"): the share of tokens whose ratio
	// π_trainer/π_engine lies outside [1/c, c]. Above 1.
	//
	// Default: 2.
	DriftRatio float64 `yaml:"drift_ratio"`
	// BufferSteps is how many steps of kept groups the service generates
	// ahead of the trainers' requests, a step being the largest K of the
	// last 8 requests (a single large request does not set it for good),
	// so that the fleet never idles while a trainer trains. Above 0 the
	// look-ahead is at least the kept groups that keep
	// generate.concurrency busy (concurrency ÷ repeat.n, rounded up), and
	// it stands from the start, before the first request. Under
	// max_staleness the look-ahead is what the staleness bound allows,
	// whichever is larger. 0: only what the waiting requests ask for.
	//
	// Default: 1.
	BufferSteps *int `yaml:"buffer_steps"`
	// CommitInterval is how often the finished groups are committed to
	// data/ and become servable (output.commit_interval in serve).
	//
	// Default: 500ms.
	CommitInterval Duration `yaml:"commit_interval"`
	// MaxStaleness, when set, bounds how stale a served group may be: a
	// group is admitted only while every group accepted or running can
	// still be used within this many policy versions of the version it
	// was admitted at, AReaL's capacity rule
	// ((version + max_staleness + 1) × step_groups groups accepted or
	// running at most; docs/policy.md). Unset: no bound.
	MaxStaleness *int `yaml:"max_staleness"`
	// StepGroups is the groups a trainer takes per policy version (its
	// steps' K), which max_staleness counts in; required with it.
	StepGroups int `yaml:"step_groups"`
	// OnStale is what becomes of a finished kept group that is stale
	// anyway under max_staleness: requeue (the prompt is sampled again),
	// drop (filter_reason stale) or keep; each is counted. A queued
	// group found stale when a step is made is not served under requeue
	// or drop, and under requeue its prompt is sampled again too.
	//
	// Default: requeue.
	OnStale string `yaml:"on_stale"`
}

// SetDefaults fills the serve section's keys left unset.
func (s *Serve) SetDefaults() {
	if s.Addr == "" {
		s.Addr = DefaultServeAddr
	}
	if s.Lease == 0 {
		s.Lease = Duration(DefaultServeLease)
	}
	if s.MaxGroupsPerStep == 0 {
		s.MaxGroupsPerStep = DefaultMaxGroupsPerStep
	}
	if s.PauseMode == "" {
		s.PauseMode = DefaultServePauseMode
	}
	if s.BufferSteps == nil {
		v := DefaultServeBufferSteps
		s.BufferSteps = &v
	}
	if s.CommitInterval == 0 {
		s.CommitInterval = Duration(DefaultServeCommit)
	}
	if s.OnStale == "" {
		s.OnStale = DefaultServeOnStale
	}
	if s.PauseTimeout == nil {
		d := Duration(DefaultServePauseTimeout)
		s.PauseTimeout = &d
	}
	if s.DriftRatio == 0 {
		s.DriftRatio = DefaultServeDriftRatio
	}
	if e := s.Eval; e != nil {
		if e.N == 0 {
			e.N = 1
		}
		e.Source.SetDefaults()
	}
}

// ServeEval is serve.eval: an evaluation set the service runs at policy
// versions every, 2×every, …, each pinned to its version (its requests
// all carry it), its results in OUTPUT/eval/v-NNNNNN beside the steps.
type ServeEval struct {
	// Source is the evaluation set: its own source section (path,
	// limit, …); the config's prompt and env score it.
	Source sources.Config `yaml:"source"`
	// N is the samples of each task, for pass@k up to N.
	//
	// Default: 1.
	N int `yaml:"n"`
	// Every is how many policy versions apart evaluations run: at
	// versions every, 2×every, … Required, at least 1.
	Every int `yaml:"every"`
}

// Staleness is max_staleness and step_groups as one value, the bound's
// one carrier from here to the staleness gate and the service
// (groups.Bound, whose Validate is the one check); nil when
// max_staleness is unset.
func (s *Serve) Staleness() *groups.Bound {
	if s.MaxStaleness == nil {
		return nil
	}
	return &groups.Bound{MaxStaleness: *s.MaxStaleness, StepGroups: s.StepGroups}
}

// PauseLimit is how long a pause lasts with no resume (pause_timeout;
// its default when unset); 0: until a resume.
func (s *Serve) PauseLimit() time.Duration {
	if s.PauseTimeout == nil {
		return DefaultServePauseTimeout
	}
	return s.PauseTimeout.D()
}

// Validate reports every problem of the serve section's keys at once. The
// token a non-loopback addr requires is checked by trajflow serve
// (NeedsToken), which alone listens.
func (s *Serve) Validate() error {
	var p pipeline.Problems
	if _, port, err := net.SplitHostPort(s.Addr); err != nil || port == "" {
		p.Add("addr", "%q: want host:port, e.g. %s", s.Addr, DefaultServeAddr)
	}
	if s.Lease < 0 {
		p.Add("lease", "must be > 0, got %s", s.Lease.D())
	}
	if s.MaxGroupsPerStep < 0 {
		p.Add("max_groups_per_step", "must be > 0, got %d", s.MaxGroupsPerStep)
	}
	p.OneOf("pause_mode", s.PauseMode, "abort", "keep")
	if s.DriftRatio != 0 && !(s.DriftRatio > 1) {
		p.Add("drift_ratio", "must be above 1 (tokens whose ratio lies outside [1/c, c] are counted), got %g", s.DriftRatio)
	}
	if s.PauseTimeout != nil && *s.PauseTimeout < 0 {
		p.Add("pause_timeout", "must be >= 0 (0: a pause lasts until a resume), got %s", s.PauseTimeout.D())
	}
	if s.BufferSteps != nil && *s.BufferSteps < 0 {
		p.Add("buffer_steps", "must be >= 0, got %d", *s.BufferSteps)
	}
	if s.CommitInterval < 0 {
		p.Add("commit_interval", "must be > 0, got %s", s.CommitInterval.D())
	}
	over := s.StepGroups < 0 || s.StepGroups > s.MaxGroupsPerStep && s.MaxGroupsPerStep > 0
	if b := s.Staleness(); b != nil {
		if over {
			b.StepGroups = 1 // reported below, as out of range
		}
		p.Section("", b.Validate())
	}
	if over {
		p.Add("step_groups", "must be between 1 and max_groups_per_step (%d), got %d", s.MaxGroupsPerStep, s.StepGroups)
	}
	p.OneOf("on_stale", s.OnStale, "requeue", "drop", "keep")
	if e := s.Eval; e != nil {
		if e.Every < 1 {
			p.Add("eval.every", "required: at least 1 (evaluations run at versions every, 2×every, …), got %d", e.Every)
		}
		if e.N < 1 {
			p.Add("eval.n", "must be at least 1 (samples a task, for pass@k), got %d", e.N)
		}
		p.Section("eval.source", e.Source.Validate())
	}
	return p.Err()
}

// NeedsToken reports whether addr (host:port) is off loopback, where
// serve requires a bearer token.
func (s *Serve) NeedsToken() bool {
	host, _, err := net.SplitHostPort(s.Addr)
	return err == nil && !IsLoopback(host)
}

// IsLoopback reports whether host (of a host:port) is a loopback address:
// localhost, 127.0.0.0/8 or ::1. An empty host (all interfaces) is not.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
