package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
	"github.com/trajflow/trajflow/serve/client"
)

// The power-cut trial of trajflow serve.
const (
	serveCutPoints = 50
	serveCutSeed   = 20261209
)

// trainerLog is what a trainer stand-in knows the service reported
// committed: the steps it was served (their bytes), the acks and policy
// versions answered 200, the last status.
type trainerLog struct {
	mu       sync.Mutex
	served   map[int64][32]byte
	leased   map[int64]bool // served, no ack sent
	unsure   map[int64]bool // an ack sent, its answer lost
	acked    map[int64]bool // an ack answered 200
	version  int64          // the highest version a set answered 200
	status   client.Status  // the last status answered
	statuses int
	errs     []string
}

// train takes steps of 2 groups until ctx ends: it acknowledges most at
// once and leaves some leased, moves the policy version on now and then
// and reads the status.
func (l *trainerLog) train(ctx context.Context, c *client.Client, rng *rand.Rand) {
	for ctx.Err() == nil {
		st, err := c.Next(ctx, 2, client.FormatParquet)
		if err != nil {
			return
		}
		sum := sha256.Sum256(st.Body)
		l.mu.Lock()
		n := st.Number
		if l.acked[n] {
			l.errs = append(l.errs, fmt.Sprintf("step %d served again after its ack was answered", n))
		} else if prev, ok := l.served[n]; ok && prev != sum {
			l.errs = append(l.errs, fmt.Sprintf("step %d served again with other bytes", n))
		} else if ok {
			l.errs = append(l.errs, fmt.Sprintf("step %d served again while leased (serve.lease 10m)", n))
		}
		l.served[n] = sum
		l.leased[n] = true
		ack, bump, status := rng.IntN(4) > 0, rng.IntN(4) == 0, rng.IntN(3) == 0
		l.mu.Unlock()
		if ack {
			l.ack(ctx, c, n)
		}
		if bump {
			l.mu.Lock()
			v := l.version + 1
			l.mu.Unlock()
			if c.SetPolicy(ctx, v) == nil {
				l.mu.Lock()
				l.version = max(l.version, v)
				l.mu.Unlock()
			}
		}
		if status {
			if s, err := c.Status(ctx); err == nil {
				l.mu.Lock()
				l.status, l.statuses = *s, l.statuses+1
				l.mu.Unlock()
			}
		}
	}
}

// ack acknowledges step n, recording whether the answer came.
func (l *trainerLog) ack(ctx context.Context, c *client.Client, n int64) error {
	l.mu.Lock()
	delete(l.leased, n)
	l.unsure[n] = true
	l.mu.Unlock()
	err := c.Ack(ctx, n)
	if err == nil {
		l.mu.Lock()
		delete(l.unsure, n)
		l.acked[n] = true
		l.mu.Unlock()
	}
	return err
}

// checkRestart checks a service started again after a cut against what
// it had reported: the status's acks and version no lower, every step
// leased (no ack sent) still leased, none acknowledged leased; then it
// acknowledges the leased steps and those whose ack's answer was lost, as
// a trainer going on across the restart does, each answered 200.
func (l *trainerLog) checkRestart(t *testing.T, c *client.Client, name string) {
	t.Helper()
	ctx := context.Background()
	s, err := c.Status(ctx)
	if err != nil {
		t.Fatalf("%s: status after the restart: %v", name, err)
	}
	l.mu.Lock()
	leases := map[int64]bool{}
	for _, ls := range s.Leases {
		leases[ls.Step] = true
	}
	var maxAcked, maxServed int64
	for n := range l.acked {
		maxAcked = max(maxAcked, n)
		if leases[n] {
			t.Errorf("%s: step %d, acknowledged (200), is leased again after the restart", name, n)
		}
	}
	for n := range l.served {
		maxServed = max(maxServed, n)
	}
	for n := range l.leased {
		if !leases[n] {
			t.Errorf("%s: step %d, served and not acknowledged, is not leased after the restart (leases %v)", name, n, s.Leases)
		}
	}
	if s.PolicyVersion < l.version {
		t.Errorf("%s: policy version %d after the restart; %d was set (200)", name, s.PolicyVersion, l.version)
	}
	if s.LastAckedStep < maxAcked {
		t.Errorf("%s: last acknowledged step %d after the restart; step %d's ack was answered", name, s.LastAckedStep, maxAcked)
	}
	if s.NextStep <= maxServed {
		t.Errorf("%s: next step %d after the restart; step %d was served", name, s.NextStep, maxServed)
	}
	if p := l.status; l.statuses > 0 && (s.PolicyVersion < p.PolicyVersion || s.LastAckedStep < p.LastAckedStep || s.NextStep < p.NextStep || s.Steps.Made < p.Steps.Made) {
		t.Errorf("%s: the status before the cut said version %d, last acked %d, next step %d, %d made; after it %d, %d, %d, %d",
			name, p.PolicyVersion, p.LastAckedStep, p.NextStep, p.Steps.Made, s.PolicyVersion, s.LastAckedStep, s.NextStep, s.Steps.Made)
	}
	pending := make([]int64, 0, len(l.leased)+len(l.unsure))
	for n := range l.leased {
		pending = append(pending, n)
	}
	for n := range l.unsure {
		pending = append(pending, n)
	}
	l.mu.Unlock()
	for _, n := range pending {
		if err := l.ack(ctx, c, n); err != nil {
			t.Errorf("%s: the ack of step %d after the restart: %v", name, n, err)
		}
	}
}

// TestServePowerCut: trajflow serve on a crashfs mount while a trainer
// stand-in (serve/client) takes steps, acknowledges most, leaves some
// leased, sets policy versions and reads the status; at random moments a
// SIGKILL and a power cut, then serve starts again. After each restart:
// every step acknowledged (200) is not leased and never served again,
// every step leased is still leased (its ack after the restart answered
// 200), the policy version, last acknowledged step and next step no
// lower than the service had answered; at the end every step served
// stands in served/ with the bytes served, and data/ holds every kept
// group once.
func TestServePowerCut(t *testing.T) {
	if testing.Short() {
		t.Skip("power-cut trial of serve: 50 restarts on a FUSE mount (skipped under -short)")
	}
	fsys := crashfstest.Mount(t)
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 3000, 11)
	out := filepath.Join(fsys.Root(), "out")
	cfg := writeServeConfig(t, dir, tasks, out)
	rng := rand.New(rand.NewPCG(serveCutSeed, 0))
	l := &trainerLog{served: map[int64][32]byte{}, leased: map[int64]bool{}, unsure: map[int64]bool{}, acked: map[int64]bool{}}
	start := func() (*serveProc, *client.Client) {
		p := startServe(t, cfg)
		c := client.New(p.url, "")
		c.Retry = client.Retry{Deadline: -1}
		return p, c
	}
	points := trialPoints(serveCutPoints)
	for cut := range points {
		p, c := start()
		name := fmt.Sprintf("cut %d", cut)
		if cut > 0 {
			l.checkRestart(t, c, name)
		}
		if t.Failed() {
			t.FailNow()
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.train(ctx, c, rand.New(rand.NewPCG(serveCutSeed, uint64(cut))))
		}()
		time.Sleep(time.Duration(50+rng.IntN(500)) * time.Millisecond)
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		cancel()
		<-done
		if err := fsys.Cut(); err != nil {
			t.Fatal(err)
		}
	}
	p, c := start()
	l.checkRestart(t, c, "the last restart")
	if code := p.signal(t, syscall.SIGTERM); code != 130 {
		t.Fatalf("SIGTERM: exit %d: %s", code, p.log())
	}
	for _, e := range l.errs {
		t.Error(e)
	}
	for n, sum := range l.served {
		b, err := os.ReadFile(filepath.Join(out, "served", fmt.Sprintf("step-%06d", n), "part-00000.parquet"))
		if err != nil {
			t.Errorf("step %d was served: %v", n, err)
			continue
		}
		if sha256.Sum256(b) != sum {
			t.Errorf("step %d stands with other bytes than were served", n)
		}
	}
	data := groupsIn(t, readDataset(t, filepath.Join(out, "data")))
	t.Logf("%d cut points; %d steps served, %d acknowledged (200) and checked after each restart, policy version %d; %d kept groups in data/, each once; 0 lost",
		points, len(l.served), len(l.acked), l.version, len(data))
}
