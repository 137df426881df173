package sim

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Main runs `trajflow sim-server`: the simulator over HTTP until ctx ends.
// It prints the listening address ("sim-server listening on http://…/v1")
// to stdout.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	addr := fs.String("addr", "127.0.0.1:8000", "listen address (host:port; port 0 picks a free one)")
	fs.Int64Var(&o.Seed, "seed", 0, "seed of every draw")
	fs.StringVar(&o.Preset, "preset", "short", "workload preset: short, reasoning or agent")
	fs.Float64Var(&o.TimeScale, "time-scale", 1, "multiplies every simulated delay (0: answer at once)")
	fs.IntVar(&o.Capacity, "capacity", 256, "batch size B: requests decoding at once")
	fs.Float64Var(&o.Accuracy, "accuracy", 0.6, "mean probability that an arithmetic answer is right")
	fs.Float64Var(&o.Keep, "keep", -1, "probability that a group gets mixed correctness (-1: off)")
	fs.IntVar(&o.GroupSize, "group-size", 0, "group size n for --keep when requests carry no sim_group_size (seed = base-seed + attempt·n + rollout_index)")
	fs.Int64Var(&o.BaseSeed, "base-seed", 0, "base seed of the groups for --keep")
	fs.IntVar(&o.MaxModelLen, "max-model-len", 0, "reject prompt + max_tokens above this with a context-length 400 (0: off)")
	fs.IntVar(&o.MinTurns, "min-turns", 0, "fewest turns per trajectory in the trailer (0: preset)")
	fs.IntVar(&o.MaxTurns, "max-turns", 0, "most turns per trajectory in the trailer (0: preset)")
	fs.DurationVar(&o.EnvDelay, "env-delay", 0, "median env delay per turn in the trailer, before time scale (0: preset)")
	fs.IntVar(&o.ObsTokens, "obs-tokens", 0, "median observation tokens per turn in the trailer (0: preset)")
	fs.StringVar(&o.Model, "model", "sim", "model name reported by /v1/models")
	fs.BoolVar(&o.StripReasoning, "strip-reasoning", false, "replies start with <think>…</think>, and the chat template drops it from assistant messages before the last user message (as Qwen3's)")
	a := fs.Duration("a", 4500*time.Microsecond, "fixed time per step, before time scale")
	c := fs.Duration("c", 45*time.Microsecond, "time per running request per step, before time scale")
	p := fs.Duration("p", 30*time.Microsecond, "time per prompt token admitted, before time scale")
	var faultSpec string
	fs.StringVar(&faultSpec, "fail", "", "faults: STATUS=P,… (e.g. 429=0.1,500=0.05,503=0.05); also reset=, stall=, malformed=, truncate=, stall_for=, retry_after=")
	reset := fs.Float64("reset", 0, "probability of a connection reset")
	stall := fs.Float64("stall", 0, "probability of a stall")
	stallFor := fs.Duration("stall-for", 2*time.Second, "how long a stall holds a request (wall time)")
	malformed := fs.Float64("malformed", 0, "probability of a malformed (non-JSON) body")
	trunc := fs.Float64("truncate", 0, "probability of a truncated body")
	retryAfter := fs.Duration("retry-after", time.Second, "Retry-After of 429 and 503 faults")
	fs.Int64Var(&o.Faults.Seed, "fault-seed", 0, "seed of the fault draws (0: --seed)")
	fs.IntVar(&o.RateLimit.RequestsPerMinute, "rpm", 0, "enforce a requests-per-minute limit: 429 past it, x-ratelimit-* headers on every response (0: none)")
	fs.IntVar(&o.RateLimit.TokensPerMinute, "tpm", 0, "enforce a tokens-per-minute limit (prompt and completion tokens; 0: none)")
	fs.DurationVar(&o.RateLimit.Window, "rate-window", time.Minute, "how much of a minute's limit the rate buckets hold (bursts past it fail)")
	fs.DurationVar(&o.BatchDelay, "batch-delay", 0, "how long a Batch API batch stays in_progress before it is answered")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("sim-server: unexpected argument %q", fs.Arg(0))
	}
	if _, ok := Presets[o.Preset]; !ok {
		return fmt.Errorf("sim-server: --preset %q: want short, reasoning or agent", o.Preset)
	}
	switch {
	case o.TimeScale < 0:
		return fmt.Errorf("sim-server: --time-scale must be >= 0, got %g", o.TimeScale)
	case o.Capacity < 1:
		return fmt.Errorf("sim-server: --capacity must be >= 1, got %d", o.Capacity)
	case o.Accuracy < 0 || o.Accuracy > 1:
		return fmt.Errorf("sim-server: --accuracy must be in [0, 1], got %g", o.Accuracy)
	case o.Keep != -1 && (o.Keep < 0 || o.Keep > 1):
		return fmt.Errorf("sim-server: --keep must be in [0, 1] or -1, got %g", o.Keep)
	case o.MaxModelLen < 0:
		return fmt.Errorf("sim-server: --max-model-len must be >= 0, got %d", o.MaxModelLen)
	case o.MinTurns < 0 || o.MaxTurns < 0 || (o.MaxTurns > 0 && o.MinTurns > o.MaxTurns):
		return fmt.Errorf("sim-server: want 0 <= --min-turns <= --max-turns, got %d and %d", o.MinTurns, o.MaxTurns)
	case o.RateLimit.RequestsPerMinute < 0 || o.RateLimit.TokensPerMinute < 0 || o.RateLimit.Window <= 0:
		return errors.New("sim-server: --rpm and --tpm must be >= 0 and --rate-window > 0")
	case o.BatchDelay < 0:
		return errors.New("sim-server: --batch-delay must be >= 0")
	case *a < 0 || *c < 0 || *p < 0:
		return errors.New("sim-server: --a, --c and --p must be >= 0")
	}
	if o.Accuracy == 0 {
		o.Accuracy = -1 // Options: negative means 0
	}
	o.A, o.C, o.P = *a, *c, *p
	o.Faults = Faults{Reset: *reset, Stall: *stall, StallFor: *stallFor, Malformed: *malformed, Truncate: *trunc, RetryAfter: *retryAfter, Seed: o.Faults.Seed}
	for name, v := range map[string]float64{"reset": *reset, "stall": *stall, "malformed": *malformed, "truncate": *trunc} {
		if v < 0 || v > 1 {
			return fmt.Errorf("sim-server: --%s must be in [0, 1], got %g", name, v)
		}
	}
	if err := ParseFaults(faultSpec, &o.Faults); err != nil {
		return fmt.Errorf("sim-server: --fail: %w", err)
	}

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *addr)
	if err != nil {
		return fmt.Errorf("sim-server: %w", err)
	}
	s := New(o)
	defer s.Close()
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 30 * time.Second}
	fmt.Fprintf(stdout, "sim-server listening on http://%s/v1\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("sim-server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Close() // fail requests still in flight so Shutdown need not wait for them
	_ = srv.Shutdown(sctx)
	// After Shutdown, Serve returns http.ErrServerClosed.
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("sim-server: %w", err)
	}
	return nil
}
