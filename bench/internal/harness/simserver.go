package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/trajflow/trajflow/inference/sim"
)

// SimHTTP is a simulated server answering over a real HTTP listener on
// 127.0.0.1: every request of a benchmark crosses the loopback network.
type SimHTTP struct {
	*sim.Server
	URL string // base URL, http://127.0.0.1:PORT/v1
	srv *http.Server
	ln  net.Listener
}

// StartSim starts a simulated server with opts on a free loopback port.
func StartSim(opts sim.Options) (*SimHTTP, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sim listener: %w", err)
	}
	s := sim.New(opts)
	h := &SimHTTP{Server: s, URL: "http://" + ln.Addr().String() + "/v1", ln: ln,
		srv: &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 30 * time.Second}}
	go func() { _ = h.srv.Serve(ln) }()
	return h, nil
}

// Close stops the listener and the simulator.
func (h *SimHTTP) Close() {
	h.Server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
}

// WaitIdle waits until no request is running or queued in the simulator
// (cancelled requests leave at the next step boundary).
func (h *SimHTTP) WaitIdle(ctx context.Context) error {
	for {
		st := h.Stats()
		if st.Running == 0 && st.Queued == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(errors.New("simulator did not go idle"), ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// StatsDelta is what a simulator did between two Stats snapshots.
type StatsDelta struct {
	Requests, Cancelled, PromptTokens, DecodedTokens, Steps int64
	Busy                                                    time.Duration
	// Preempted are the requests a higher-priority one took out of the
	// batch, RecomputedTokens what they prefilled again on resuming.
	Preempted, RecomputedTokens int64
}

// MeanBatch is the mean number of running requests per step.
func (d StatsDelta) MeanBatch() float64 {
	if d.Steps == 0 {
		return 0
	}
	return float64(d.DecodedTokens) / float64(d.Steps)
}

// Delta is after − before.
func Delta(before, after sim.Stats) StatsDelta {
	return StatsDelta{
		Requests: after.Requests - before.Requests, Cancelled: after.Cancelled - before.Cancelled,
		PromptTokens: after.PromptTokens - before.PromptTokens, DecodedTokens: after.DecodedTokens - before.DecodedTokens,
		Steps: after.Steps - before.Steps, Busy: after.Busy - before.Busy,
		Preempted: after.Preempted - before.Preempted, RecomputedTokens: after.RecomputedTokens - before.RecomputedTokens,
	}
}
