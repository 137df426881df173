package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

// orderConfig writes a dynamic-sampling config on an HTTP endpoint:
// groups of 4 under keep: nonzero_std with two attempts per task, and the
// groups keys given (YAML flow entries).
func orderConfig(t *testing.T, dir, name, tasks, out, endpoint, groups string) string {
	t.Helper()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	cfg := fmt.Sprintf(`run: {id: e2e, progress: 0}
source: {path: %s}
prompt: {system: "You are a careful mathematician.", user: "Solve: {question}"}
repeat: {n: 4, seed: 1234}
generate:
  endpoints: [%s]
  model: sim-math
  concurrency: 64
  params: {temperature: 1.0, max_tokens: 256}
env: {name: math, answer_field: expected_answer}
groups: {keep: nonzero_std, max_attempts: 2, %s}
output: {dir: %s, filtered: true}
`, q(tasks), q(endpoint), groups, q(out))
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// keptGroups is the sorted list of the groups in a data directory, with
// their filter reasons ("" for a kept group).
func keptGroups(t *testing.T, dir string) []string {
	t.Helper()
	seen := map[pipeline.GroupKey]string{}
	for _, r := range readDataset(t, dir).rows {
		if !r.Kept {
			t.Fatalf("%s: row %+v not kept", dir, r.Key())
		}
		seen[pipeline.GroupKey{TaskIndex: r.Task.Index, Attempt: r.Attempt}] = r.FilterReason
	}
	keys := make([]pipeline.GroupKey, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].TaskIndex < keys[j].TaskIndex })
	var out []string
	for _, k := range keys {
		s := fmt.Sprintf("%d/%d", k.TaskIndex, k.Attempt)
		if seen[k] != "" {
			s += " " + seen[k]
		}
		out = append(out, s)
	}
	return out
}

// outcome is what a reference run (no target) says of each task: its
// groups by attempt, kept or dropped.
type outcome struct {
	kept    map[int64]int     // task → the attempt that was kept
	dropped map[int64][]int   // task → the attempts dropped by the rule
	reason  map[string]string // "task/attempt" → filter reason
}

// reference runs the config without a target and reads which group of
// every task passes the keep rule, from data/ and filtered/.
func reference(t *testing.T, dir, tasks, endpoint string) outcome {
	t.Helper()
	out := filepath.Join(dir, "ref")
	cfg := orderConfig(t, dir, "ref.yaml", tasks, out, endpoint, "order: completion")
	if res := run(t, "run", cfg); res.code != 0 {
		t.Fatalf("reference run exited %d:\n%s", res.code, res.stderr)
	}
	o := outcome{kept: map[int64]int{}, dropped: map[int64][]int{}, reason: map[string]string{}}
	for _, r := range readDataset(t, filepath.Join(out, "data")).rows {
		o.kept[r.Task.Index] = r.Attempt
	}
	seen := map[pipeline.GroupKey]bool{}
	for _, r := range readDataset(t, filepath.Join(out, "filtered")).rows {
		k := pipeline.GroupKey{TaskIndex: r.Task.Index, Attempt: r.Attempt}
		if !seen[k] {
			seen[k] = true
			o.dropped[k.TaskIndex] = append(o.dropped[k.TaskIndex], k.Attempt)
			o.reason[fmt.Sprintf("%d/%d", k.TaskIndex, k.Attempt)] = r.FilterReason
		}
	}
	return o
}

// firstPassing is the first k kept groups in task order of a reference.
func (o outcome) firstPassing(k, tasks int) []string {
	var out []string
	for i := range int64(tasks) {
		if a, ok := o.kept[i]; ok && len(out) < k {
			out = append(out, fmt.Sprintf("%d/%d", i, a))
		}
	}
	return out
}

// TestTaskOrderKeepsTheFirstPassingGroups: with groups.order: task, runs
// with a target against a simulator served over HTTP whose requests are
// held at random (stalls) keep exactly the first K passing groups in task
// order, every time, also when interrupted and resumed; with order:
// completion the same runs keep groups that finished first, which is not
// that set.
func TestTaskOrderKeepsTheFirstPassingGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("several simulated runs over HTTP (skipped under -short)")
	}
	const tasks, target = 120, 24
	dir := t.TempDir()
	data := writeTasks(t, dir, tasks, 11)
	ref := reference(t, dir, data, simServer(t))
	want := ref.firstPassing(target, tasks)
	if len(want) != target {
		t.Fatalf("the reference keeps %d groups, fewer than the target %d", len(want), target)
	}
	// Every run gets its own server whose stalls hold a random 5% of the
	// requests 3s, drawn from its own fault seed: a passing group among
	// the first K is held long past the moment the other groups reach the
	// target, so completion order overtakes it.
	stalling := func(seed int) string {
		return simServer(t, "--time-scale", "0.02", "--stall", "0.05", "--stall-for", "3s", "--fault-seed", fmt.Sprint(seed))
	}
	groups := fmt.Sprintf("target: %d", target)
	for i := range 2 {
		out := filepath.Join(dir, fmt.Sprintf("task%d", i))
		cfg := orderConfig(t, dir, fmt.Sprintf("task%d.yaml", i), data, out, stalling(100+i), groups+", order: task")
		res := run(t, "run", cfg)
		if res.code != 0 {
			t.Fatalf("order: task run %d exited %d:\n%s", i, res.code, res.stderr)
		}
		if got := keptGroups(t, filepath.Join(out, "data")); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("order: task run %d kept\n%v\nwant the first %d passing groups in task order\n%v", i, got, target, want)
		}
	}
	// An interrupted task-order run and its resume keep the same set: the
	// stop commits only groups released in order, and the resume redoes
	// the tasks behind the one it cut off.
	out := filepath.Join(dir, "interrupted")
	cfg := orderConfig(t, dir, "interrupted.yaml", data, out, stalling(300), groups+", order: task")
	// Commit every 100ms; interrupt once the first part file is there.
	cmd := exec.Command(binary, "run", cfg, "--set", "output.commit_interval=100ms")
	stderr := interruptAfterFirstCommit(t, cmd, filepath.Join(out, "data"))
	partial := keptGroups(t, filepath.Join(out, "data"))
	switch code := cmd.ProcessState.ExitCode(); {
	case code == 0 && strings.Join(partial, ",") == strings.Join(want, ","):
		// The target was reached in the release that made the first
		// commit: the run ended before the interrupt reached it.
		t.Log("the run reached its target before the interrupt")
	case code != 130:
		t.Fatalf("interrupted order: task run exited %d, want 130:\n%s", code, stderr.String())
	case len(partial) == 0 || len(partial) > target || strings.Join(partial, ",") != strings.Join(want[:len(partial)], ","):
		// The whole set is a prefix too: the interrupt may come after the
		// last commit, while the run shuts down.
		t.Fatalf("the interrupted run committed\n%v\nwant a non-empty prefix of\n%v", partial, want)
	}
	res := run(t, "run", cfg, "--set", "output.commit_interval=100ms")
	if res.code != 0 {
		t.Fatalf("resume exited %d:\n%s", res.code, res.stderr)
	}
	// The summary counts the earlier run's kept groups towards the target.
	wantLine := fmt.Sprintf("target: %d kept groups of %d (%d by earlier runs, %d by this run)", target, target, len(partial), target-len(partial))
	if len(partial) == target {
		wantLine = fmt.Sprintf("target: already reached by earlier runs (%d kept groups committed, target %d); nothing to do", target, target)
	}
	if !strings.Contains(res.stdout, wantLine) {
		t.Fatalf("the resume's summary lacks %q:\n%s", wantLine, res.stdout)
	}
	if got := keptGroups(t, filepath.Join(out, "data")); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("interrupted and resumed, order: task kept\n%v\nwant\n%v", got, want)
	}
	t.Logf("interrupted after %d of %d kept groups; the resume kept the same set", len(partial), target)
	// A further rerun has nothing to do: it ends at once, with success.
	res = run(t, "run", cfg)
	if reached := fmt.Sprintf("target: already reached by earlier runs (%d kept groups committed, target %d)", target, target); res.code != 0 || !strings.Contains(res.stdout, reached) {
		t.Fatalf("a rerun of the finished run exited %d, want 0 and %q:\n%s%s", res.code, reached, res.stdout, res.stderr)
	}

	// Completion order: the kept set depends on timing. One of up to three
	// runs must differ from the first passing groups, or the test would
	// not tell the two orders apart.
	for i := range 3 {
		out := filepath.Join(dir, fmt.Sprintf("completion%d", i))
		cfg := orderConfig(t, dir, fmt.Sprintf("completion%d.yaml", i), data, out, stalling(200+i), groups)
		res := run(t, "run", cfg)
		if res.code != 0 {
			t.Fatalf("order: completion run %d exited %d:\n%s", i, res.code, res.stderr)
		}
		got := keptGroups(t, filepath.Join(out, "data"))
		if len(got) != target {
			t.Fatalf("order: completion run %d kept %d groups, want %d", i, len(got), target)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Logf("order: completion run %d kept another set than the first %d passing groups:\n%v", i, target, got)
			return
		}
	}
	t.Fatal("three order: completion runs all kept the first passing groups in task order: the test cannot tell the orders apart")
}

// TestOnExhausted: a run whose input ends short of the target exits 3 and
// commits only what the rule kept (groups.on_exhausted: exit, the
// default); with keep_unfiltered it fills the target with the last
// attempts the rule dropped, first in task order, kept and marked
// "unfiltered:REASON", says so in the summary and exits 0; when even they
// fall short it commits them all and exits 3.
func TestOnExhausted(t *testing.T) {
	if testing.Short() {
		t.Skip("several simulated runs over HTTP (skipped under -short)")
	}
	const tasks = 16
	dir := t.TempDir()
	data := writeTasks(t, dir, tasks, 3)
	url := simServer(t, "--time-scale", "0.02", "--stall", "0.15", "--stall-for", "100ms")
	ref := reference(t, dir, data, url)
	passing := len(ref.kept)
	// The last attempts the rule dropped, in task order.
	var lastDropped []string
	for i := range int64(tasks) {
		if _, ok := ref.kept[i]; ok {
			continue
		}
		if len(ref.dropped[i]) != 2 {
			t.Fatalf("task %d: dropped attempts %v, want 2", i, ref.dropped[i])
		}
		k := fmt.Sprintf("%d/1", i)
		lastDropped = append(lastDropped, k+" unfiltered:"+ref.reason[k])
	}
	if passing == 0 || len(lastDropped) < 2 {
		t.Fatalf("the reference keeps %d of %d tasks: the test needs some of each", passing, tasks)
	}
	fill := passing + len(lastDropped) - 1 // one short of every task
	expect := func(k int) []string {
		all := append(ref.firstPassing(passing, tasks), lastDropped[:k]...)
		sort.Slice(all, func(i, j int) bool {
			var a, b int
			fmt.Sscanf(all[i], "%d", &a)
			fmt.Sscanf(all[j], "%d", &b)
			return a < b
		})
		return all
	}
	for _, tc := range []struct {
		name, groups string
		code         int
		want         []string
		summary      string
	}{
		{"exit", fmt.Sprintf("target: %d, order: task", fill), 3, expect(0), fmt.Sprintf("kept %d of %d groups", passing, fill)},
		{"keep_unfiltered", fmt.Sprintf("target: %d, order: task, on_exhausted: keep_unfiltered", fill), 0, expect(len(lastDropped) - 1),
			fmt.Sprintf("%d kept (%d of them unfiltered", fill, len(lastDropped)-1)},
		{"keep_unfiltered, completion order", fmt.Sprintf("target: %d, on_exhausted: keep_unfiltered", tasks), 0, expect(len(lastDropped)),
			fmt.Sprintf("%d kept (%d of them unfiltered", tasks, len(lastDropped))},
		{"keep_unfiltered, still short", fmt.Sprintf("target: %d, order: task, on_exhausted: keep_unfiltered", tasks+5), 3, expect(len(lastDropped)),
			fmt.Sprintf("kept %d of %d groups", tasks, tasks+5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			cfg := orderConfig(t, dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml", data, out, url, tc.groups)
			res := run(t, "run", cfg)
			if res.code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s%s", res.code, tc.code, res.stdout, res.stderr)
			}
			if !strings.Contains(res.stdout+res.stderr, tc.summary) {
				t.Errorf("output does not say %q:\n%s%s", tc.summary, res.stdout, res.stderr)
			}
			got := keptGroups(t, filepath.Join(out, "data"))
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("data/ holds\n%v\nwant\n%v", got, tc.want)
			}
			// What was kept unfiltered is not also in filtered/.
			for _, r := range readDataset(t, filepath.Join(out, "filtered")).rows {
				if r.Kept || strings.HasPrefix(r.FilterReason, "unfiltered:") {
					t.Fatalf("filtered/ holds a kept row %+v (%s)", r.Key(), r.FilterReason)
				}
				for _, g := range got {
					if strings.HasPrefix(g, fmt.Sprintf("%d/%d ", r.Task.Index, r.Attempt)) {
						t.Fatalf("group %s is in data/ and filtered/", g)
					}
				}
			}
		})
	}
}
