package runstats

import (
	"strings"
	"testing"
	"time"
)

// The live view's rate-limit phrase says its wait is summed over
// requests: 18 minutes of waits can fit in a 36-second run, and a bare
// "waited 18m" read as the run's time.
func TestHostedPartsSayWaitsAreSummed(t *testing.T) {
	parts := strings.Join(HostedStats{RateLimitWaiting: 32, RateLimitWait: 18 * time.Minute}.Parts(), "; ")
	if !strings.Contains(parts, "rate limit: 32 waiting, 18m0s of waits summed over requests") || strings.Contains(parts, "waited 18m") {
		t.Fatalf("parts %q", parts)
	}
}
