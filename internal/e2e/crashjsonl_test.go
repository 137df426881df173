package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/schema"
)

// TestCrashResumeGymJSONL: runs with output.jsonl (and jsonl_rows: all,
// filtered groups written) killed with SIGKILL at random moments, then
// resumed to the end, leave one NeMo Gym JSONL file beside every committed
// part of data/ and filtered/, holding exactly one line per row of that
// part (the same traj_ids), each with the rollout's start as created_at,
// and nothing else in jsonl/: no line of an uncommitted row, none twice.
func TestCrashResumeGymJSONL(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: seconds of simulated runs (skipped under -short)")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	cfg := filepath.Join(dir, "gym.yaml")
	yaml := fmt.Sprintf(`run: {id: e2e, progress: 0}
source: {path: %s}
prompt: {system: "You are a careful mathematician.", user: "Solve: {question}"}
repeat: {n: 4, seed: 1234}
generate:
  endpoints: ["sim://"]
  model: sim-math
  concurrency: 64
  params: {temperature: 1.0, max_tokens: 256}
  sim: {seed: 7, accuracy: 0.6, time_scale: 0.05}
env: {name: math, answer_field: expected_answer}
groups: {keep: nonzero_std}
output: {dir: %s, file_rows: 64, batch_rows: 16, filtered: true, jsonl: true, jsonl_rows: all}
`, q(writeTasks(t, dir, 600, 5)), q(out))
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(out, schema.DataDir)
	landed := 0
	for k := range 6 {
		before := len(parts(t, data))
		killed, res := runAndKill(t, cfg, data, before+1, time.Duration(k*41%200)*time.Millisecond)
		if !killed {
			if res.code != 0 {
				t.Fatalf("run %d exited %d:\n%s", k, res.code, res.stderr)
			}
			break
		}
		landed++
	}
	if landed == 0 {
		t.Fatal("no kill landed before its run finished")
	}
	final := run(t, "run", cfg)
	if final.code != 0 {
		t.Fatalf("final resume exited %d:\n%s%s", final.code, final.stdout, final.stderr)
	}

	jsonlDir := filepath.Join(out, schema.JSONLDir)
	files := 0
	lines, rows := 0, 0
	for _, dest := range []string{schema.DataDir, schema.FilteredDir} {
		for _, part := range parts(t, filepath.Join(out, dest)) {
			var n int
			fmt.Sscanf(strings.TrimPrefix(filepath.Base(part), schema.PartPrefix+"-"), "%d", &n)
			partRows, _ := readFile(t, part, nopAlloc)
			want := map[string]bool{}
			for _, r := range partRows {
				want[r.TrajID] = true
			}
			rows += len(partRows)
			name := schema.GymJSONLName(dest, n)
			f, err := os.Open(filepath.Join(jsonlDir, name))
			if err != nil {
				t.Fatalf("part %s has no JSONL file: %v", part, err)
			}
			files++
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 1<<24)
			got := 0
			for sc.Scan() {
				var l struct {
					Response struct {
						CreatedAt int64 `json:"created_at"`
					} `json:"response"`
					Trajflow struct {
						TrajID string `json:"traj_id"`
						Status string `json:"status"`
					} `json:"trajflow"`
				}
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !want[l.Trajflow.TrajID] {
					t.Fatalf("%s: line of %s, which is not a row of %s (or has a line already)", name, l.Trajflow.TrajID, part)
				}
				delete(want, l.Trajflow.TrajID)
				if l.Response.CreatedAt < time.Now().Add(-time.Hour).Unix() || l.Response.CreatedAt > time.Now().Unix() {
					t.Fatalf("%s: %s: created_at %d is not the rollout's start", name, l.Trajflow.TrajID, l.Response.CreatedAt)
				}
				if (dest == schema.FilteredDir) != (l.Trajflow.Status == "filtered") {
					t.Fatalf("%s: %s has status %s", name, l.Trajflow.TrajID, l.Trajflow.Status)
				}
				got++
			}
			f.Close()
			if len(want) > 0 {
				t.Fatalf("%s: %d rows of %s have no line", name, len(want), part)
			}
			lines += got
		}
	}
	entries, err := os.ReadDir(jsonlDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != files {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("jsonl/ holds %d entries for %d committed parts: %v", len(entries), files, names)
	}
	if lines != rows || rows == 0 {
		t.Fatalf("%d lines for %d committed rows", lines, rows)
	}
	t.Logf("%d kills landed; %d lines in %d files, one per committed row", landed, lines, files)
}
