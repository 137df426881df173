package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/trajflow/trajflow/serve/client"
)

// replayed is a step as a trainer received it.
type replayed struct {
	body                   []byte
	step, versions, groups string
}

func nextStep(t *testing.T, url, format string) (replayed, int) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("%s/v1/steps/next?groups=2&format=%s", url, format))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	h := resp.Header
	return replayed{b, h.Get(client.HeaderStep), h.Get(client.HeaderVersions), h.Get(client.HeaderGroups)}, resp.StatusCode
}

func ackOf(t *testing.T, url, step string) {
	t.Helper()
	resp, err := http.Post(url+"/v1/steps/"+step+"/ack", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("ack of step %s: %d", step, resp.StatusCode)
	}
}

// TestServeReplayKill: steps served by trajflow serve to a trainer over
// HTTP, then replayed by `trajflow serve --replay OUT`: the trainer gets
// the same steps (bytes of each format, numbers, versions, groups), and
// across a kill -9 of the replaying service it goes on where it was (its
// acks and its lease kept), until it is told that every recorded step was
// served.
func TestServeReplayKill(t *testing.T) {
	if testing.Short() {
		t.Skip("serve and replay processes (skipped under -short)")
	}
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 200, 29)
	out := filepath.Join(dir, "out")
	live := startServe(t, writeServeConfig(t, dir, tasks, out))
	formats := []string{client.FormatParquet, client.FormatArrow, client.FormatJSONL, client.FormatArrow}
	var first []replayed
	for i, f := range formats {
		s, code := nextStep(t, live.url, f)
		if code != http.StatusOK {
			t.Fatalf("live step %d: %d %s", i+1, code, s.body)
		}
		first = append(first, s)
		ackOf(t, live.url, s.step)
	}
	if code := live.signal(t, syscall.SIGTERM); code != 130 && code != 0 {
		t.Fatalf("serve exited %d: %s", code, live.log())
	}
	same := func(got replayed, code int, want replayed, what string) {
		t.Helper()
		if code != http.StatusOK || !bytes.Equal(got.body, want.body) || got.step != want.step || got.versions != want.versions || got.groups != want.groups {
			t.Fatalf("%s: %d, step %q versions %q groups %q (%d bytes); first served step %q versions %q groups %q (%d bytes)",
				what, code, got.step, got.versions, got.groups, len(got.body), want.step, want.versions, want.groups, len(want.body))
		}
	}
	rp := startServe(t, "--replay", out, "--addr", "127.0.0.1:0")
	s, code := nextStep(t, rp.url, formats[0])
	same(s, code, first[0], "replayed step 1")
	ackOf(t, rp.url, s.step)
	s, code = nextStep(t, rp.url, formats[1])
	same(s, code, first[1], "replayed step 2")
	// kill -9 with step 2 leased and not acknowledged.
	rp.cmd.Process.Signal(syscall.SIGKILL)
	<-rp.done
	rp = startServe(t, "--replay", out, "--addr", "127.0.0.1:0")
	ackOf(t, rp.url, first[1].step) // the trainer goes on across the restart
	for i := 2; i < len(first); i++ {
		s, code = nextStep(t, rp.url, formats[i])
		same(s, code, first[i], fmt.Sprintf("after kill -9, replayed step %d", i+1))
		ackOf(t, rp.url, s.step)
	}
	if s, code = nextStep(t, rp.url, client.FormatArrow); code != http.StatusServiceUnavailable {
		t.Fatalf("past the recording: %d %s", code, s.body)
	}
}
