package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trajflow/trajflow/serve/client"
)

// TestServeVersionJumpsOverHTTP: a trainer that takes a step, pauses,
// moves the policy on by two versions and resumes, six times, gets six
// steps in a row from trajflow serve generating over HTTP with
// generate.api chat and no token ids (trajflow sim-server), in both pause
// modes. Each step holds only groups within serve.max_staleness of the
// trainer's version, and the groups set aside as stale are no more than
// the work in flight or queued at the bumps explains. Before the fix the
// rows without token ids read as version 0: every group kept after the
// first bump was set aside as stale and its task sampled again, and step
// 2 never came.
func TestServeVersionJumpsOverHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("a sim-server and two serve processes (skipped under -short)")
	}
	const (
		n, k, conc = 4, 8, 64
		maxStale   = 1
		steps      = 6
		jump       = 2
	)
	sim := simServer(t, "--time-scale", "0.2", "--accuracy", "0.5")
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 2000, 23)
	for _, mode := range []string{"abort", "keep"} {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(dir, "out-"+mode)
			q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
			cfg := fmt.Sprintf(`run: {id: e2e-serve-jumps}
source: {path: %s}
prompt: {user: "Solve: {question}"}
repeat: {n: %d, seed: 1234}
generate:
  endpoints: [%s]
  model: sim-math
  concurrency: %d
  params: {temperature: 1.0, max_tokens: 128}
env: {name: math, answer_field: expected_answer}
groups: {keep: nonzero_std}
output: {dir: %s}
serve: {addr: "127.0.0.1:0", commit_interval: 100ms, max_staleness: %d, step_groups: %d, pause_mode: %s}
`, q(tasks), n, q(sim), conc, q(out), maxStale, k, mode)
			path := filepath.Join(dir, "serve-"+mode+".yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			p := startServe(t, path)
			c := client.New(p.url, "")
			version := int64(0)
			for s := range steps {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				step, err := c.Next(ctx, k, client.FormatJSONL)
				if err != nil {
					st, _ := c.Status(context.Background())
					cancel()
					t.Fatalf("step %d at version %d: %v; status %+v; %s", s+1, version, err, st, p.log())
				}
				for _, v := range step.Versions {
					if version-v > maxStale {
						t.Errorf("step %d at version %d holds tokens of version %d (versions %v)", step.Number, version, v, step.Versions)
					}
				}
				step.Release()
				if err := c.Ack(ctx, step.Number); err != nil {
					t.Fatal(err)
				}
				if err := c.Pause(ctx, mode); err != nil {
					t.Fatal(err)
				}
				version += jump
				if err := c.SetPolicy(ctx, version); err != nil {
					t.Fatal(err)
				}
				if err := c.Resume(ctx); err != nil {
					t.Fatal(err)
				}
				cancel()
			}
			st, err := c.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			// What a bump can make stale: the groups in flight (at most
			// concurrency/n) and those queued ahead, at most the
			// staleness bound's look-ahead ((max_staleness+1) steps).
			// (A jump past max_staleness at every step sets about as
			// many groups aside as it serves: the stale guard may warn,
			// as it should; its alarm is not checked here.)
			bound := steps * (conc/n + (maxStale+1)*k)
			if st.StaleGroups > bound {
				t.Errorf("%d groups set aside as stale over %d bumps (at most %d in flight or queued), %d kept", st.StaleGroups, steps, bound, st.GroupsKept)
			}
			t.Logf("%s: %d steps; %d kept, %d stale, %d requeued", mode, st.Steps.Made, st.GroupsKept, st.StaleGroups, st.RequeuedGroups)
		})
	}
}
