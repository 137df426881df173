package serve_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/serve/client"
)

// answered is a step as a trainer received it: its body's bytes and the
// headers that say what it is.
type answered struct {
	body                         []byte
	step, versions, rows, groups string
}

// takeStep asks for a step of k groups in a format over plain HTTP and
// returns it as received; a status other than 200 is returned as such.
func takeStep(t *testing.T, url string, k int, format string) (answered, int) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("%s/v1/steps/next?groups=%d&format=%s", url, k, format))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	h := resp.Header
	return answered{b, h.Get(client.HeaderStep), h.Get(client.HeaderVersions), h.Get(client.HeaderRows), h.Get(client.HeaderGroups)}, resp.StatusCode
}

func ackStep(t *testing.T, url, step string) {
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

// startReplay starts serve.Replay over out in the test's process.
func startReplay(t *testing.T, out string, sets ...string) *started {
	t.Helper()
	cfg, err := config.Decode([]byte("{}"), "replay", append([]string{`serve.addr=127.0.0.1:0`}, sets...))
	if err != nil {
		t.Fatal(err)
	}
	return startWith(t, serve.Options{}, func(ctx context.Context, opts serve.Options) error {
		return serve.Replay(ctx, out, cfg.Serve, opts)
	})
}

// TestReplayServesTheSameSteps: a run served to a trainer, then replayed
// (trajflow serve --replay): the trainer receives the same steps, in the
// same order, byte for byte in each format, with the same numbers,
// versions, rows and groups, and nothing is generated; once every
// recorded step is served, a request is told so (503, ended); the
// replay's acks survive its restart, and the recording is never changed.
func TestReplayServesTheSameSteps(t *testing.T) {
	out := t.TempDir()
	live := start(t, testConfig(t, out), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	formats := []string{client.FormatParquet, client.FormatArrow, client.FormatJSONL, client.FormatArrow}
	var first []answered
	for i, format := range formats {
		a, code := takeStep(t, live.url, 2, format)
		if code != http.StatusOK {
			t.Fatalf("live step %d: %d %s", i+1, code, a.body)
		}
		first = append(first, a)
		ackStep(t, live.url, a.step)
		if i == 1 {
			if err := client.New(live.url, "").SetPolicy(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	live.stop(t)
	recorded, err := os.ReadFile(filepath.Join(out, schema.ServedDir, schema.ServeStateFile))
	if err != nil {
		t.Fatal(err)
	}

	rp := startReplay(t, out)
	for i, want := range first[:2] {
		got, code := takeStep(t, rp.url, 2, formats[i])
		if code != http.StatusOK {
			t.Fatalf("replayed step %d: %d %s", i+1, code, got.body)
		}
		if !bytes.Equal(got.body, want.body) || got.step != want.step || got.versions != want.versions || got.rows != want.rows || got.groups != want.groups {
			t.Fatalf("replayed step %s (%s): %d bytes, headers %q %q %q %q; first served: step %s, %d bytes, %q %q %q",
				want.step, formats[i], len(got.body), got.step, got.versions, got.rows, got.groups, want.step, len(want.body), want.versions, want.rows, want.groups)
		}
		ackStep(t, rp.url, got.step)
	}
	// A restart of the replay keeps its acks: the next step is the third.
	rp.stop(t)
	rp = startReplay(t, out)
	for i, want := range first[2:] {
		got, code := takeStep(t, rp.url, 2, formats[2+i])
		if code != http.StatusOK || !bytes.Equal(got.body, want.body) || got.step != want.step || got.versions != want.versions {
			t.Fatalf("after a restart, replayed step %d: %d, step %q versions %q (want %q %q), same bytes %v", 3+i, code, got.step, got.versions, want.step, want.versions, bytes.Equal(got.body, want.body))
		}
		ackStep(t, rp.url, got.step)
	}
	a, code := takeStep(t, rp.url, 2, client.FormatArrow)
	if code != http.StatusServiceUnavailable || !strings.Contains(string(a.body), "the replay served every recorded step") {
		t.Fatalf("past the recording: %d %s, want 503 saying the replay served every recorded step", code, a.body)
	}
	st, err := client.New(rp.url, "").Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps.Made != len(first) || st.Steps.Acked != len(first) || st.GroupsKept != 0 || st.InGeneration != 0 {
		t.Fatalf("the replay's status: %+v", st)
	}
	after, err := os.ReadFile(filepath.Join(out, schema.ServedDir, schema.ServeStateFile))
	if err != nil || !bytes.Equal(after, recorded) {
		t.Fatalf("the replay changed the recording's state (%v)", err)
	}
}

// A recorded step whose folder is gone is said and never served: the
// others are, and the request past them names it.
func TestReplayMissingStep(t *testing.T) {
	out := t.TempDir()
	live := start(t, testConfig(t, out), serve.Options{})
	var first []answered
	for range 2 {
		a, code := takeStep(t, live.url, 2, client.FormatParquet)
		if code != http.StatusOK {
			t.Fatalf("live: %d %s", code, a.body)
		}
		first = append(first, a)
		ackStep(t, live.url, a.step)
	}
	live.stop(t)
	if err := os.RemoveAll(filepath.Join(out, schema.ServedDir, schema.ServedStepDir(1))); err != nil {
		t.Fatal(err)
	}
	rp := startReplay(t, out)
	got, code := takeStep(t, rp.url, 2, client.FormatParquet)
	if code != http.StatusOK || got.step != first[1].step || !bytes.Equal(got.body, first[1].body) {
		t.Fatalf("the step after a missing one: %d step %q %s", code, got.step, got.body)
	}
	ackStep(t, rp.url, got.step)
	a, code := takeStep(t, rp.url, 2, client.FormatParquet)
	if code != http.StatusServiceUnavailable || !strings.Contains(string(a.body), "steps [1] could not be") {
		t.Fatalf("past the recording: %d %s", code, a.body)
	}
	if !strings.Contains(rp.log(), "step 1 is recorded but") {
		t.Fatalf("the missing step is not said: %s", rp.log())
	}
}

// A directory no service recorded steps in cannot be replayed: the error
// says so before anything listens.
func TestReplayNothingRecorded(t *testing.T) {
	cfg, err := config.Decode([]byte("{}"), "replay", []string{"serve.addr=127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	err = serve.Replay(context.Background(), t.TempDir(), cfg.Serve, serve.Options{Listening: func(net.Addr) { t.Error("listened") }})
	if err == nil || !strings.Contains(err.Error(), "holds no recorded steps") {
		t.Fatalf("replay of an empty directory: %v", err)
	}
}
