package config

import (
	"net"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// Defaults of the serve section.
const (
	DefaultServeAddr        = "127.0.0.1:8700"
	DefaultServeLease       = 10 * time.Minute
	DefaultMaxGroupsPerStep = 4096
	DefaultServePauseMode   = "abort"
	DefaultServeCommit      = 500 * time.Millisecond
	DefaultServeBufferSteps = 1
)

// Serve is the serve section: the settings of `trajflow serve`, the
// rollout service that hands training steps to trainers over HTTP
// (docs/serve.md). A run ignores it.
type Serve struct {
	// Addr is the host:port the service listens on (the command's
	// --addr). Any address but loopback requires a bearer token
	// (token_env).
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
	// BufferSteps is how many steps of kept groups the service generates
	// ahead of the trainers' requests, a step being the size of the
	// largest request so far, so that the fleet never idles while a
	// trainer trains.
	//
	// Default: 1.
	BufferSteps *int `yaml:"buffer_steps"`
	// CommitInterval is how often the finished groups are committed to
	// data/ and become servable (output.commit_interval in serve).
	//
	// Default: 500ms.
	CommitInterval Duration `yaml:"commit_interval"`
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
	if s.BufferSteps != nil && *s.BufferSteps < 0 {
		p.Add("buffer_steps", "must be >= 0, got %d", *s.BufferSteps)
	}
	if s.CommitInterval < 0 {
		p.Add("commit_interval", "must be > 0, got %s", s.CommitInterval.D())
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
