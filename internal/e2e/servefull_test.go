package e2e

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/internal/crashfs"
	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
	"github.com/trajflow/trajflow/serve/client"
)

// TestServeDiskFull: trajflow serve on a crashfs mount whose state file
// cannot be written for a full disk (ENOSPC on its writes): a new step,
// an ack and a policy version it cannot record are answered 503 (reason
// disk_full) with Retry-After, and nothing of them is done (the status
// shows the step still leased, the version unchanged, no other step
// made); once space is freed the same calls are answered 200, and after
// a kill -9 and a power cut the restarted service has them.
func TestServeDiskFull(t *testing.T) {
	fsys := crashfstest.Mount(t)
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 3000, 11)
	out := filepath.Join(fsys.Root(), "out")
	cfg := writeServeConfig(t, dir, tasks, out)
	p := startServe(t, cfg)
	c := client.New(p.url, "")
	c.Retry = client.Retry{Deadline: -1}
	ctx := context.Background()
	st, err := c.Next(ctx, 2, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	// The state file's writes fail as on a full disk (the run's own
	// commits, which would stop serve: TestServeRunDiskFull, go on).
	fsys.Inject(crashfs.Fault{Op: crashfs.Write, Err: syscall.ENOSPC, Match: ".state.json.tmp-*"})
	for name, call := range map[string]func() error{
		"ack":     func() error { return c.Ack(ctx, st.Number) },
		"version": func() error { return c.SetPolicy(ctx, 3) },
		"next": func() error {
			_, err := c.Next(ctx, 2, client.FormatParquet)
			return err
		},
	} {
		err := call()
		var e *client.Error
		if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || e.Reason != client.ReasonDiskFull {
			t.Fatalf("%s on a full disk: %v, want a 503 disk_full", name, err)
		}
	}
	// The header, read directly.
	req, _ := http.NewRequest(http.MethodPost, p.url+"/v1/steps/"+strconv.FormatInt(st.Number, 10)+"/ack", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("ack on a full disk: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	s, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.PolicyVersion != 0 || s.LastAckedStep != 0 || len(s.Leases) != 1 || s.Leases[0].Step != st.Number || s.Steps.Made != 1 {
		t.Fatalf("after the 503s the status says version %d, last acked %d, leases %v, %d steps made: something was done",
			s.PolicyVersion, s.LastAckedStep, s.Leases, s.Steps.Made)
	}
	fsys.ClearFaults()
	if err := c.Ack(ctx, st.Number); err != nil {
		t.Fatalf("ack once space is freed: %v", err)
	}
	if err := c.SetPolicy(ctx, 3); err != nil {
		t.Fatalf("version once space is freed: %v", err)
	}
	st2, err := c.Next(ctx, 2, client.FormatParquet)
	if err != nil {
		t.Fatalf("next once space is freed: %v", err)
	}
	if code := p.signal(t, syscall.SIGKILL); code != -1 {
		t.Logf("kill -9: exit %d", code)
	}
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	p = startServe(t, cfg)
	c = client.New(p.url, "")
	s, err = c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.PolicyVersion != 3 || s.LastAckedStep != st.Number || len(s.Leases) != 1 || s.Leases[0].Step != st2.Number {
		t.Fatalf("after the cut: version %d, last acked %d, leases %v; want 3, %d, step %d leased", s.PolicyVersion, s.LastAckedStep, s.Leases, st.Number, st2.Number)
	}
}

// TestServeRunDiskFull: when the run inside trajflow serve cannot commit
// (its disk full), serve stops with exit code 5 and the disk message, as
// trajflow run does (before: exit 1 and the bare error).
func TestServeRunDiskFull(t *testing.T) {
	fsys := crashfstest.Mount(t)
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 3000, 11)
	out := filepath.Join(fsys.Root(), "out")
	p := startServe(t, writeServeConfig(t, dir, tasks, out))
	fsys.SetFree(0)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not stop on a full disk:\n%s", p.log())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 5 || !strings.Contains(p.log(), "trajflow serve: the disk is full (no space left on device) at "+out+"/") {
		t.Fatalf("exit %d, want 5 and the disk message:\n%s", code, p.log())
	}
}
