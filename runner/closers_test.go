package runner

import (
	"errors"
	"strings"
	"testing"
)

// The closers' errors are the run's: each one Check adds is joined,
// the others run too, and in reverse order.
func TestCleanupJoinsTheClosersErrors(t *testing.T) {
	errA, errB := errors.New("a failed"), errors.New("b failed")
	var order []string
	r := &run{}
	r.closers.Check(func() error { order = append(order, "a"); return errA })
	r.closers.Add(func() { order = append(order, "plain") })
	r.closers.Check(func() error { order = append(order, "ok"); return nil })
	r.closers.Check(func() error { order = append(order, "b"); return errB })
	r.closers.run()
	if !errors.Is(r.closers.err, errA) || !errors.Is(r.closers.err, errB) {
		t.Fatalf("closeErr %v, want both failures", r.closers.err)
	}
	if got := strings.Join(order, ","); got != "b,ok,plain,a" {
		t.Fatalf("closers ran %s", got)
	}
}
