package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/ipc"

	"github.com/trajflow/trajflow/inference/cache"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
	"github.com/trajflow/trajflow/schema"
)

// The power-cut trials of the other targets (docs/reliability.md, "Power
// cuts"): smaller runs than TestPowerCutResume's, so that each keeps
// its 50 cut points near 90 s on 2 cores (under -race; more where the
// machine is loaded).
const (
	allTasks, allN     = 40, 4 // every output on
	shardTasks, shardN = 90, 2 // three shards
	shardCount         = 3
	cacheTasks         = 90 // the response cache, n 1
	batchTasks         = 60 // the Batch API, n 1
	targetTimeScale    = 0.02
)

// q is s as a YAML (JSON) string.
func q(s string) string { b, _ := json.Marshal(s); return string(b) }

// writeVLMTasks writes n tasks whose prompt holds a PNG of its own (a
// data URL): each row's image is a new file of output.images.
func writeVLMTasks(t *testing.T, dir string, n int) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i := range n {
		img := image.NewRGBA(image.Rect(0, 0, 2, 2))
		img.Set(0, 0, color.RGBA{uint8(i), uint8(i >> 8), 7, 255})
		img.Set(1, 1, color.RGBA{uint8(i * 31), 1, uint8(i * 7), 255})
		var p bytes.Buffer
		if err := png.Encode(&p, img); err != nil {
			t.Fatal(err)
		}
		url := "data:image/png;base64," + base64.StdEncoding.EncodeToString(p.Bytes())
		row := map[string]any{
			"id": fmt.Sprintf("img-%05d", i),
			"messages": []any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": "How many bytes does this PNG image have? Put the number in \\boxed{}."},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": url}},
			}}},
			"expected_answer": strconv.Itoa(p.Len()),
		}
		if err := enc.Encode(row); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "vlm.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPowerCutAllOutputs: a VLM-style run (a PNG of its own in each
// task's prompt) with every output on: Parquet parts, output.steps,
// output.jsonl, output.arrow_stream, output.openai_batch and
// output.images: reference. After each cut, besides checkSurvived: every
// committed part has its steps file (the same trajectories), its OpenAI
// Batch files (one line per row), every image its rows reference (the
// bytes of their SHA-256), and an Arrow stream there reads whole; after a
// finished run the stream is there. At the end of each directory every
// (task, rollout) once in every output and no companion file without its
// part.
func TestPowerCutAllOutputs(t *testing.T) {
	if testing.Short() {
		t.Skip("power-cut trials: 50 simulated runs on a FUSE mount (skipped under -short)")
	}
	fsys := crashfstest.Mount(t)
	dir := t.TempDir()
	tasks := writeVLMTasks(t, dir, allTasks)
	cutTrial(t, fsys, cutTarget{
		total: allTasks * allN,
		cmds: func(t *testing.T, out string) []*exec.Cmd {
			cfg := writeFile(t, filepath.Join(dir, filepath.Base(out)+".yaml"), fmt.Sprintf(`run: {id: powercut-all, progress: 0.02}
source: {path: %s}
repeat: {n: %d, seed: 11}
generate:
  endpoints: ["sim://"]
  model: sim-vlm
  concurrency: 64
  params: {temperature: 1.0, max_tokens: 64}
  sim: {seed: 5, accuracy: 0.7, time_scale: %g}
env: {name: math, answer_field: expected_answer}
groups: {keep: all}
output: {dir: %s, file_rows: 40, batch_rows: 16, jsonl: true, steps: true, openai_batch: true, images: reference, arrow_stream: %s}
`, q(tasks), allN, targetTimeScale, q(out), q(out+".arrows")))
			return []*exec.Cmd{exec.Command(binary, "run", cfg)}
		},
		rows: countRows,
		check: func(t *testing.T, out, name string, finished bool) (int, bool) {
			rows, ok := checkSurvived(t, out, name)
			ok = checkCompanions(t, out, name, false) && ok
			ok = checkArrowStream(t, out+".arrows", name, finished, allTasks*allN) && ok
			if finished {
				ok = checkFinished(t, out, name, rows, allTasks*allN) && ok
			}
			return rows, ok
		},
		whole: func(t *testing.T, out string) {
			checkOnce(t, out, allTasks, allN, nil)
			checkCompanions(t, out, out, true)
		},
	}, trialPoints(cutPoints), cutSeed+1)
}

// checkCompanions checks the companion files of out's committed parts:
// steps/ (the part's trajectories), openai_batch/ (a line a row) and
// images/ (every reference of the part's rows, its bytes those of its
// hash). whole: no companion without its part.
func checkCompanions(t *testing.T, out, name string, whole bool) bool {
	t.Helper()
	ok := true
	fail := func(format string, args ...any) {
		t.Errorf(name+": "+format, args...)
		ok = false
	}
	paths, _ := filepath.Glob(filepath.Join(out, schema.DataDir, schema.PartGlob))
	parts := map[string]bool{}
	for _, p := range paths {
		rs, err := readback.File(p)
		if err != nil {
			continue // checkSurvived said so
		}
		base := filepath.Base(p)
		parts[base] = true
		digits, _ := partName(base)
		n, _ := strconv.Atoi(digits)
		type key struct {
			task    int64
			rollout int32
		}
		want := map[key]bool{}
		for _, r := range rs {
			want[key{r.Task.Index, int32(r.RolloutIndex)}] = true
			for _, m := range r.Messages {
				for _, part := range m.Parts {
					if part.Type != pipeline.PartImage {
						continue
					}
					hash, isRef := strings.CutPrefix(part.ImageURL, "sha256:")
					if !isRef {
						fail("%s: an image not stored as a reference: %.40s", base, part.ImageURL)
						continue
					}
					files, _ := filepath.Glob(filepath.Join(out, schema.ImagesDir, hash+".*"))
					if len(files) != 1 {
						fail("%s: image %s referenced, %d files of it in %s", base, hash, len(files), schema.ImagesDir)
						continue
					}
					b, err := os.ReadFile(files[0])
					sum := sha256.Sum256(b)
					if err != nil || hex.EncodeToString(sum[:]) != hash {
						fail("%s: image %s holds %d bytes of another hash (%v)", base, files[0], len(b), err)
					}
				}
			}
		}
		steps, err := readback.StepsFile(filepath.Join(out, schema.StepsDir, base))
		if err != nil {
			fail("the steps file of %s: %v", base, err)
		} else {
			got := map[key]bool{}
			for _, s := range steps {
				got[key{s.TaskIndex, s.RolloutIndex}] = true
			}
			if len(got) != len(want) {
				fail("the steps file of %s holds %d trajectories, its part %d", base, len(got), len(want))
			}
			for k := range got {
				if !want[k] {
					fail("the steps file of %s holds %+v, its part does not", base, k)
				}
			}
		}
		lines := 0
		for _, kind := range []string{schema.OpenAIBatchOutput, schema.OpenAIBatchErrors} {
			f := filepath.Join(out, schema.OpenAIBatchDir, schema.OpenAIBatchName(kind, schema.DataDir, n))
			c, err := countLines(f)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				fail("%v", err)
			}
			lines += c
		}
		if lines != len(rs) {
			fail("the OpenAI Batch files of %s hold %d lines, the part %d rows", base, lines, len(rs))
		}
	}
	if whole {
		stepFiles, _ := filepath.Glob(filepath.Join(out, schema.StepsDir, schema.PartGlob))
		for _, f := range stepFiles {
			if !parts[filepath.Base(f)] {
				fail("%s without its part", f)
			}
		}
		batchFiles, _ := filepath.Glob(filepath.Join(out, schema.OpenAIBatchDir, "*"+schema.JSONLExt))
		for _, f := range batchFiles {
			found := false
			for p := range parts {
				digits, _ := partName(p)
				n, _ := strconv.Atoi(digits)
				for _, kind := range []string{schema.OpenAIBatchOutput, schema.OpenAIBatchErrors} {
					found = found || filepath.Base(f) == schema.OpenAIBatchName(kind, schema.DataDir, n)
				}
			}
			if !found {
				fail("%s without its part", f)
			}
		}
	}
	return ok
}

// checkArrowStream reads the Arrow stream at path whole, when there is
// one (it is put in place as its run ends); finished: it must be there,
// with at most total rows (a resume streams the rows it commits).
func checkArrowStream(t *testing.T, path, name string, finished bool, total int) bool {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && !finished {
		return true
	}
	if err != nil {
		t.Errorf("%s: the Arrow stream: %v", name, err)
		return false
	}
	defer f.Close()
	r, err := ipc.NewReader(f)
	if err != nil {
		t.Errorf("%s: the Arrow stream %s does not read: %v", name, path, err)
		return false
	}
	defer r.Release()
	rows := 0
	for r.Next() {
		rows += int(r.Record().NumRows())
	}
	if err := r.Err(); err != nil || rows > total {
		t.Errorf("%s: the Arrow stream %s: %d rows (%v)", name, path, rows, err)
		return false
	}
	return true
}

// checkOnce checks a finished directory: every (task, rollout) of the
// tasks in (every task when in is nil) exactly once, the output.jsonl
// files one line per row, inputs.jsonl one line per task.
func checkOnce(t *testing.T, out string, tasks, n int, in func(task int64) bool) {
	t.Helper()
	if in == nil {
		in = func(int64) bool { return true }
	}
	rows, err := readback.Dir(filepath.Join(out, schema.DataDir))
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		task    int64
		rollout int
	}
	seen := map[key]int{}
	for _, r := range rows {
		seen[key{r.Task.Index, r.RolloutIndex}]++
	}
	want := 0
	for task := range int64(tasks) {
		if !in(task) {
			continue
		}
		want += n
		for ro := range n {
			if c := seen[key{task, ro}]; c != 1 {
				t.Errorf("%s: task %d rollout %d is there %d times", out, task, ro, c)
			}
		}
	}
	if len(rows) != want {
		t.Errorf("%s: %d rows, want %d", out, len(rows), want)
	}
	sides, _ := filepath.Glob(filepath.Join(out, schema.JSONLDir, "*.jsonl"))
	lines := 0
	for _, s := range sides {
		c, err := countLines(s)
		if err != nil {
			t.Fatal(err)
		}
		lines += c
	}
	if lines != len(rows) {
		t.Errorf("%s: the output.jsonl files hold %d lines for %d rows", out, lines, len(rows))
	}
	b, err := os.ReadFile(filepath.Join(out, schema.InputsFile))
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[int64]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			TaskIndex int64 `json:"task_index"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("%s: %v", schema.InputsFile, err)
		}
		inputs[line.TaskIndex]++
	}
	for task := range int64(tasks) {
		if in(task) && inputs[task] != 1 {
			t.Errorf("%s: %s holds task %d %d times", out, schema.InputsFile, task, inputs[task])
		}
	}
}

// TestPowerCutShards: three shards of a sharded run (source.shard: auto
// from Slurm's array variables) run at once into one root, all killed at
// a random moment and the power cut; then each resumed. After each cut:
// the root's manifest.json, when there, reads whole with the count 3;
// every shard directory passes checkSurvived and holds only its own
// tasks, its shard.json (when there) reads whole; the rows are no fewer
// than the shards had reported committed. At the end of each root every
// shard holds each of its (task, rollout) once, and trajflow stats says
// "3 of 3 shards, all complete".
func TestPowerCutShards(t *testing.T) {
	if testing.Short() {
		t.Skip("power-cut trials: 50 simulated runs on a FUSE mount (skipped under -short)")
	}
	fsys := crashfstest.Mount(t)
	dir := t.TempDir()
	tasks := writeTasks(t, dir, shardTasks, 5)
	shardDir := func(out string, i int) string {
		return filepath.Join(out, schema.ShardsDir, schema.ShardDirName(i, shardCount))
	}
	cutTrial(t, fsys, cutTarget{
		total: shardTasks * shardN,
		cmds: func(t *testing.T, out string) []*exec.Cmd {
			cfg := writeFile(t, filepath.Join(dir, filepath.Base(out)+".yaml"), fmt.Sprintf(`run: {id: powercut-shards, progress: 0.02}
source: {path: %s, shard: auto}
prompt: {user: "Solve: {question}"}
repeat: {n: %d, seed: 1234}
generate:
  endpoints: ["sim://"]
  model: sim-math
  concurrency: 32
  params: {temperature: 1.0, max_tokens: 64}
  sim: {seed: 7, accuracy: 0.6, time_scale: %g}
env: {name: math, answer_field: expected_answer}
groups: {keep: all}
output: {dir: %s, file_rows: 20, batch_rows: 10, jsonl: true}
`, q(tasks), shardN, targetTimeScale, q(out)))
			var cmds []*exec.Cmd
			for i := range shardCount {
				cmd := exec.Command(binary, "run", cfg)
				for _, kv := range os.Environ() {
					k, _, _ := strings.Cut(kv, "=")
					if !strings.HasPrefix(k, "SLURM_") && k != "JOB_COMPLETION_INDEX" && k != "TRAJFLOW_SHARD_COUNT" && k != "RANK" && k != "WORLD_SIZE" {
						cmd.Env = append(cmd.Env, kv)
					}
				}
				cmd.Env = append(cmd.Env, slurm(i, shardCount)...)
				cmds = append(cmds, cmd)
			}
			return cmds
		},
		rows: func(t *testing.T, out string) int {
			n := 0
			for i := range shardCount {
				n += countRows(t, shardDir(out, i))
			}
			return n
		},
		check: func(t *testing.T, out, name string, finished bool) (int, bool) {
			ok := true
			if b, err := os.ReadFile(filepath.Join(out, schema.ManifestFile)); err == nil {
				var m struct {
					Shards int `json:"shards"`
				}
				if err := json.Unmarshal(b, &m); err != nil || m.Shards != shardCount {
					t.Errorf("%s: %s after the cut: %d bytes, shards %d (%v)", name, schema.ManifestFile, len(b), m.Shards, err)
					ok = false
				}
			} else if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s: %v", name, err)
				ok = false
			}
			rows := 0
			for i := range shardCount {
				sd := shardDir(out, i)
				n, sok := checkSurvived(t, sd, fmt.Sprintf("%s shard %d", name, i))
				ok = ok && sok
				rows += n
				if n > 0 {
					if _, err := os.Stat(filepath.Join(out, schema.ManifestFile)); err != nil {
						t.Errorf("%s: shard %d holds %d rows and the root's %s: %v", name, i, n, schema.ManifestFile, err)
						ok = false
					}
				}
				rs, _ := readback.Dir(filepath.Join(sd, schema.DataDir))
				for _, r := range rs {
					if int(r.Task.Index)%shardCount != i {
						t.Errorf("%s: shard %d holds task %d", name, i, r.Task.Index)
						ok = false
					}
				}
				if b, err := os.ReadFile(filepath.Join(sd, schema.ShardStatusFile)); err == nil && !json.Valid(b) {
					t.Errorf("%s: shard %d's %s is damaged after the cut: %q", name, i, schema.ShardStatusFile, b)
					ok = false
				}
				if finished {
					ok = checkFinished(t, sd, fmt.Sprintf("%s shard %d", name, i), n, shardTasks/shardCount*shardN) && ok
				}
			}
			return rows, ok
		},
		whole: func(t *testing.T, out string) {
			for i := range shardCount {
				checkOnce(t, shardDir(out, i), shardTasks, shardN, func(task int64) bool { return int(task)%shardCount == i })
			}
			if r := run(t, "stats", "--json", out); r.code != 0 || !strings.Contains(r.stderr, "3 of 3 shards, all complete") {
				t.Errorf("%s: stats: exit %d\n%s", out, r.code, r.stderr)
			}
		},
	}, trialPoints(cutPoints), cutSeed+2)
}

// TestPowerCutCache: runs against an HTTP simulator with generate.cache
// in a directory of the output's disk (one per output directory). After
// each cut: the cache opens (inference/cache.Open), every entry there
// reads whole (its checksum), and it holds an entry for every committed
// row at least (each row one request; an answer is stored, synced,
// before its row can be committed). At the end of each directory the rows
// are exactly once, and a run of the same config into a new output
// directory is answered from the cache alone: "response cache: 90 hits,
// 0 misses", no request reaching the server.
func TestPowerCutCache(t *testing.T) {
	if testing.Short() {
		t.Skip("power-cut trials: 50 simulated runs on a FUSE mount (skipped under -short)")
	}
	fsys := crashfstest.Mount(t)
	dir := t.TempDir()
	tasks := writeTasks(t, dir, cacheTasks, 7)
	s := sim.New(sim.Options{Seed: 3, Model: "sim-math", TimeScale: targetTimeScale})
	var requests atomic.Int64
	h := s.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			requests.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { ts.Close(); s.Close() })
	config := func(out string) string {
		return writeFile(t, filepath.Join(dir, filepath.Base(out)+".yaml"), fmt.Sprintf(`run: {id: powercut-cache, progress: 0.02}
source: {path: %s}
prompt: {user: "Solve: {question}"}
repeat: {n: 1, seed: 99}
generate:
  endpoints: [%s]
  model: sim-math
  concurrency: 32
  params: {temperature: 1.0, max_tokens: 64}
  max_attempts: 8
  backoff_base: 20ms
  cache: %s
env: {name: math, answer_field: expected_answer, max_turns: 1}
groups: {keep: all}
output: {dir: %s, file_rows: 40, batch_rows: 16, jsonl: true}
`, q(tasks), q(ts.URL+"/v1"), q(out+".cache"), q(out)))
	}
	cutTrial(t, fsys, cutTarget{
		total: cacheTasks,
		cmds: func(t *testing.T, out string) []*exec.Cmd {
			return []*exec.Cmd{exec.Command(binary, "run", config(out))}
		},
		rows: countRows,
		check: func(t *testing.T, out, name string, finished bool) (int, bool) {
			rows, ok := checkSurvived(t, out, name)
			entries, cok := checkCache(t, out+".cache", name)
			ok = ok && cok
			if entries < rows {
				t.Errorf("%s: the cache holds %d entries after the cut, for %d committed rows", name, entries, rows)
				ok = false
			}
			if finished {
				ok = checkFinished(t, out, name, rows, cacheTasks) && ok
			}
			return rows, ok
		},
		whole: func(t *testing.T, out string) {
			checkOnce(t, out, cacheTasks, 1, nil)
			before := requests.Load()
			cfg := config(out)
			again := out + "-again"
			r := run(t, "run", cfg, "--set", "output.dir="+again)
			if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("response cache: %d hits, 0 misses", cacheTasks)) || requests.Load() != before {
				t.Errorf("%s: the run again from the cache: exit %d, %d requests sent:\n%s\n%s", out, r.code, requests.Load()-before, r.stdout, r.stderr)
			}
			if err := os.RemoveAll(again); err != nil {
				t.Fatal(err)
			}
		},
	}, trialPoints(cutPoints), cutSeed+3)
}

// checkCache opens the cache at dir as a run does and reads every entry's
// checksum; it returns the entries.
func checkCache(t *testing.T, dir, name string) (int, bool) {
	t.Helper()
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return 0, true
	}
	if _, err := cache.Open(dir, 0); err != nil {
		t.Errorf("%s: the cache does not open after the cut: %v", name, err)
		return 0, false
	}
	entries, ok := 0, true
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		head, body, _ := bytes.Cut(b, []byte("\n"))
		f := strings.Fields(string(head))
		sum := sha256.Sum256(body)
		if len(f) != 4 || f[0]+" "+f[1] != "trajflow-cache 1" || f[2] != hex.EncodeToString(sum[:]) || f[3] != strconv.Itoa(len(body)) {
			t.Errorf("%s: cache entry %s is damaged after the cut (%d bytes)", name, path, len(b))
			ok = false
		}
		entries++
		return nil
	})
	if err != nil {
		t.Errorf("%s: %v", name, err)
		ok = false
	}
	return entries, ok
}

// TestPowerCutBatchAPI: generate.api: batch against the simulator's
// Batch API (a new server for each output directory, as a provider keeps
// its batches across the client's crashes). After each cut: the rows
// reported committed are there, batches.jsonl reads (a run opens it),
// and at the end of each directory the server has seen every request
// submitted exactly once (a batch recorded as submitted is never
// submitted again, and none is lost: every row committed, once).
func TestPowerCutBatchAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("power-cut trials: 50 simulated runs on a FUSE mount (skipped under -short)")
	}
	fsys := crashfstest.Mount(t)
	dir := t.TempDir()
	tasks := writeTasks(t, dir, batchTasks, 13)
	var srv *sim.Server
	var ts *httptest.Server
	stop := func() {
		if ts != nil {
			ts.Close()
			srv.Close()
		}
	}
	t.Cleanup(stop)
	cutTrial(t, fsys, cutTarget{
		total: batchTasks,
		open: func(t *testing.T, out string) {
			stop()
			srv = sim.New(sim.Options{Seed: 3, Model: "sim-math", BatchDelay: 150 * time.Millisecond})
			ts = httptest.NewServer(srv.Handler())
		},
		cmds: func(t *testing.T, out string) []*exec.Cmd {
			cfg := writeFile(t, filepath.Join(dir, filepath.Base(out)+".yaml"), fmt.Sprintf(`run: {id: powercut-batch, progress: 0.02}
source: {path: %s}
prompt: {user: "Solve: {question}"}
repeat: {n: 1, seed: 99}
generate:
  endpoints: [%s]
  model: sim-math
  params: {temperature: 1.0, max_tokens: 64}
  max_attempts: 8
  backoff_base: 20ms
  api: batch
  concurrency: 1000
  batch: {max_requests: 20, flush_after: 50ms, poll_interval: 30ms}
env: {name: math, answer_field: expected_answer, max_turns: 1}
groups: {keep: all}
output: {dir: %s, file_rows: 20, batch_rows: 10, jsonl: true}
`, q(tasks), q(ts.URL+"/v1"), q(out)))
			return []*exec.Cmd{exec.Command(binary, "run", cfg)}
		},
		rows: countRows,
		check: func(t *testing.T, out, name string, finished bool) (int, bool) {
			rows, ok := checkSurvived(t, out, name)
			if b, err := os.ReadFile(filepath.Join(out, schema.BatchStateFile)); err == nil {
				for i, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
					if len(line) > 0 && !json.Valid(line) {
						t.Errorf("%s: %s line %d is damaged after the cut: %q", name, schema.BatchStateFile, i+1, line)
						ok = false
					}
				}
			}
			if finished {
				ok = checkFinished(t, out, name, rows, batchTasks) && ok
			}
			return rows, ok
		},
		whole: func(t *testing.T, out string) {
			checkOnce(t, out, batchTasks, 1, nil)
			st := srv.BatchStats()
			if len(st.Submitted) != batchTasks || st.Lines != batchTasks {
				t.Errorf("%s: the server saw %d distinct requests in %d lines (%d batches), want %d each", out, len(st.Submitted), st.Lines, st.Batches, batchTasks)
			}
			for id, n := range st.Submitted {
				if n != 1 {
					t.Errorf("%s: request %s submitted %d times", out, id, n)
				}
			}
		},
	}, trialPoints(cutPoints), cutSeed+4)
}
