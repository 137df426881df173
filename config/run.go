package config

import (
	"net"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// Defaults of the run section's stop and failure keys.
const (
	DefaultOnSignal     = "cancel"
	DefaultGrace        = 30 * time.Second
	DefaultMaxErrorRate = 0.5
	DefaultResumeErrors = "redo"
)

func (r *Run) setDefaults() {
	if r.OnSignal == "" {
		r.OnSignal = DefaultOnSignal
	}
	if r.Grace == 0 {
		r.Grace = Duration(DefaultGrace)
	}
	if r.MaxErrorRate == nil {
		v := DefaultMaxErrorRate
		r.MaxErrorRate = &v
	}
	if r.ResumeErrors == "" {
		r.ResumeErrors = DefaultResumeErrors
	}
}

// validate reports every problem of the run section's keys at once.
func (r *Run) validate() error {
	var p pipeline.Problems
	p.OneOf("on_signal", r.OnSignal, "cancel", "drain")
	if r.Grace <= 0 {
		p.Add("grace", "must be > 0, got %s", r.Grace.D())
	}
	if r.MaxErrorRate != nil && !(*r.MaxErrorRate >= 0 && *r.MaxErrorRate <= 1) {
		p.Add("max_error_rate", "must be in [0, 1], got %v", *r.MaxErrorRate)
	}
	p.OneOf("resume_errors", r.ResumeErrors, "redo", "keep")
	if r.MetricsAddr != "" {
		if _, port, err := net.SplitHostPort(r.MetricsAddr); err != nil || port == "" {
			p.Add("metrics_addr", "%q: want host:port, e.g. 127.0.0.1:9464", r.MetricsAddr)
		}
	}
	return p.Err()
}

// ErrorRateLimit is run.max_error_rate (its default when unset).
func (r *Run) ErrorRateLimit() float64 {
	if r.MaxErrorRate == nil {
		return DefaultMaxErrorRate
	}
	return *r.MaxErrorRate
}
