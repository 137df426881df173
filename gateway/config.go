package gateway

import (
	"net"
	"strconv"

	"github.com/trajflow/trajflow/pipeline"
)

// DefaultAddr is where the gateway listens unless gateway.addr says
// otherwise: loopback, on a free port.
const DefaultAddr = "127.0.0.1:0"

// Config is the gateway section: where the agent gateway listens while a
// run with an agent environment (env.name: agent) goes. The gateway is
// started only for such a run.
type Config struct {
	// Addr is the host:port the gateway listens on; port 0 takes a free
	// one. The agents reach it at the base URLs trajflow gives each of
	// them, so a non-loopback host is needed only for agents on other
	// machines. env nemo_gym_agent needs a fixed port: its agent servers
	// are configured with their model server's address
	// (http://ADDR/v1/responses) before the run.
	//
	// Default: `127.0.0.1:0`.
	Addr string `yaml:"addr"`
	// MaxBody is the largest call body in bytes the gateway reads; a
	// larger one is refused with 413.
	//
	// Default: `33554432` (32 MiB).
	MaxBody int64 `yaml:"max_body"`
}

// SetDefaults fills in what the section left out.
func (c *Config) SetDefaults() {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
}

// Validate reports every problem of the section, keys relative to it.
func (c *Config) Validate() error {
	var p pipeline.Problems
	if host, port, err := net.SplitHostPort(c.Addr); err != nil {
		p.Add("addr", "%q is not host:port: %v", c.Addr, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		p.Add("addr", "%q: port %q is not a number from 0 to 65535", c.Addr, port)
	} else if host == "" {
		p.Add("addr", "%q has no host: name one (127.0.0.1 for this machine only)", c.Addr)
	}
	if c.MaxBody < 0 {
		p.Add("max_body", "%d is negative", c.MaxBody)
	}
	return p.Err()
}
