package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/trajflow/trajflow/readback"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
)

// MinIO test credentials. The secret is planted to be searched for: no
// byte of the output, stdout or stderr may hold it.
const (
	minioUser   = "trajflowtest"
	minioSecret = "s3-secret-Zq9vX2pL7kR4mT8w"
	minioBucket = "trajflow-e2e"
)

// minioBinary finds the MinIO server .ci/run installs: $TRAJFLOW_MINIO,
// minio on PATH, or ~/.cache/trajflow-minio/minio. Without one the test
// skips, unless CI=true, where it fails.
func minioBinary(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("TRAJFLOW_MINIO")}
	if p, err := exec.LookPath("minio"); err == nil {
		candidates = append(candidates, p)
	}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, filepath.Join(home, ".cache", "trajflow-minio", "minio"))
	}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no MinIO server binary (TRAJFLOW_MINIO, minio on PATH, ~/.cache/trajflow-minio/minio): .ci/run installs it")
	}
	t.Skip("no MinIO server binary (.ci/run installs it into ~/.cache/trajflow-minio)")
	return ""
}

// startMinIO starts a MinIO server on a free local port, with its data in
// a temporary directory, and returns its endpoint and a client.
func startMinIO(t *testing.T) (endpoint string, client *minio.Client) {
	t.Helper()
	bin := minioBinary(t)
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "server", t.TempDir(), "--address", addr, "--console-address", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--quiet")
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+minioUser, "MINIO_ROOT_PASSWORD="+minioSecret, "MINIO_BROWSER=off")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	endpoint = "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("MinIO not ready within a minute: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	client, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(minioUser, minioSecret, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.MakeBucket(context.Background(), minioBucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	return endpoint, client
}

// s3Env is the environment a trajflow process talks to the server with.
func s3Env(endpoint, secret string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	return append(env, "AWS_ENDPOINT_URL="+endpoint, "AWS_ACCESS_KEY_ID="+minioUser,
		"AWS_SECRET_ACCESS_KEY="+secret, "AWS_REGION=us-east-1")
}

// runEnv runs trajflow to completion with env and args.
// runExactEnv runs the binary with exactly env as its environment.
func runExactEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// objects lists the keys under prefix.
func objects(t *testing.T, c *minio.Client, prefix string) []minio.ObjectInfo {
	t.Helper()
	var out []minio.ObjectInfo
	for o := range c.ListObjects(context.Background(), minioBucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		out = append(out, o)
	}
	return out
}

// download copies every object under prefix into dir, keeping the layout.
func download(t *testing.T, c *minio.Client, prefix, dir string) {
	t.Helper()
	for _, o := range objects(t, c, prefix) {
		dst := filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(o.Key, prefix)))
		if err := c.FGetObject(context.Background(), minioBucket, o.Key, dst, minio.GetObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMinIO runs trajflow against a real MinIO server: input read from
// s3://, output committed to s3://, stats on the bucket, kill -9 during
// the uploads, and a resume that leaves every rollout exactly once.
func TestMinIO(t *testing.T) {
	if testing.Short() {
		t.Skip("MinIO test: starts a server and several runs (skipped under -short)")
	}
	endpoint, client := startMinIO(t)
	env := s3Env(endpoint, minioSecret)
	dir := t.TempDir()
	const tasks, n = 1500, 4
	local := writeTasks(t, dir, tasks, 3)
	if _, err := client.FPutObject(context.Background(), minioBucket, "input/tasks.jsonl", local, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	source := "s3://" + minioBucket + "/input/tasks.jsonl"
	var outputs []string // every stdout and stderr, scanned for the secret

	t.Run("bad credentials", func(t *testing.T) {
		cfg := writeConfig(t, dir, "bad.yaml", runConfig{tasks: source, out: "s3://" + minioBucket + "/bad", n: 2, timeScale: 0, fileRows: 100, batchRows: 64})
		res := runExactEnv(t, s3Env(endpoint, "not-the-secret"), "run", "--quiet", cfg)
		if res.code != 4 || !strings.Contains(res.stderr, "source.path") && !strings.Contains(res.stderr, "output.dir") {
			t.Fatalf("bad credentials: exit %d, want 4 naming the key:\n%s", res.code, res.stderr)
		}
		missing := writeConfig(t, dir, "nobucket.yaml", runConfig{tasks: local, out: "s3://no-such-bucket/x", n: 2, fileRows: 100, batchRows: 64})
		res = runExactEnv(t, env, "run", "--quiet", missing)
		if res.code != 4 || !strings.Contains(res.stderr, "output.dir s3://no-such-bucket/x") {
			t.Fatalf("missing bucket: exit %d, want 4 naming output.dir:\n%s", res.code, res.stderr)
		}
		outputs = append(outputs, res.stdout, res.stderr)
	})

	t.Run("run and stats", func(t *testing.T) {
		out := "s3://" + minioBucket + "/runs/whole"
		cfg := writeConfig(t, dir, "whole.yaml", runConfig{tasks: source, out: out, n: n, timeScale: 0, fileRows: 1000, batchRows: 64})
		// validate reads the rows from the bucket and checks output.dir's.
		val := runExactEnv(t, env, "validate", cfg)
		outputs = append(outputs, val.stdout, val.stderr)
		if val.code != 0 || !strings.Contains(val.stdout, "bucket "+minioBucket+" reachable") || !strings.Contains(val.stdout, "What is") {
			t.Fatalf("validate exited %d:\n%s%s", val.code, val.stdout, val.stderr)
		}
		res := runExactEnv(t, env, "run", "--quiet", cfg)
		outputs = append(outputs, res.stdout, res.stderr)
		if res.code != 0 {
			t.Fatalf("run exited %d:\n%s%s", res.code, res.stdout, res.stderr)
		}
		if !strings.Contains(res.stdout, fmt.Sprintf("rows written: %d,", tasks*n)) || !strings.Contains(res.stdout, "output: "+out+"/data (") || !strings.Contains(res.stdout, "metrics: "+out+"/metrics.json") {
			t.Errorf("the summary does not name the committed objects:\n%s", res.stdout)
		}
		keys := map[string]bool{}
		for _, o := range objects(t, client, "runs/whole/") {
			keys[strings.TrimPrefix(o.Key, "runs/whole/")] = true
		}
		for _, want := range []string{"data/part-00000.parquet", "metrics.json", "inputs.jsonl", ".trajflow.key"} {
			if !keys[want] {
				t.Errorf("bucket lacks %s: %v", want, keys)
			}
		}
		if keys[".trajflow.lock"] {
			t.Errorf("the lock object outlived the run")
		}
		st := runExactEnv(t, env, "stats", "--json", out)
		outputs = append(outputs, st.stdout, st.stderr)
		if st.code != 0 {
			t.Fatalf("stats exited %d:\n%s", st.code, st.stderr)
		}
		var m struct {
			Rows int64 `json:"rows"`
		}
		if err := json.Unmarshal([]byte(st.stdout), &m); err != nil || m.Rows != tasks*n {
			t.Fatalf("stats s3://: rows %d (%v), want %d:\n%s", m.Rows, err, tasks*n, st.stdout)
		}
		got := filepath.Join(dir, "whole")
		download(t, client, "runs/whole/", got)
		if ds := readDataset(t, filepath.Join(got, "data")); len(ds.rows) != tasks*n {
			t.Fatalf("read back %d rows from MinIO, want %d", len(ds.rows), tasks*n)
		}
		// merge and report read the bucket too; merge writes to it.
		mg := runExactEnv(t, env, "merge", "--out", "s3://"+minioBucket+"/merged", out)
		outputs = append(outputs, mg.stdout, mg.stderr)
		if mg.code != 0 {
			t.Fatalf("merge exited %d:\n%s", mg.code, mg.stderr)
		}
		merged := filepath.Join(dir, "merged")
		download(t, client, "merged/", merged)
		if ds := readDataset(t, filepath.Join(merged, "data")); len(ds.rows) != tasks*n {
			t.Fatalf("merge into s3://: %d rows, want %d", len(ds.rows), tasks*n)
		}
		rp := runExactEnv(t, env, "report", out)
		outputs = append(outputs, rp.stdout, rp.stderr)
		if rp.code != 0 || !strings.Contains(rp.stdout, out+"/report.html") {
			t.Fatalf("report exited %d:\n%s%s", rp.code, rp.stdout, rp.stderr)
		}
		if _, err := client.StatObject(context.Background(), minioBucket, "runs/whole/report.html", minio.StatObjectOptions{}); err != nil {
			t.Fatalf("report.html not in the bucket: %v", err)
		}
	})

	t.Run("shards", func(t *testing.T) {
		// Three shards started at once on one s3:// root agree on its key
		// and manifest (conditional PUTs), and stats and merge of the root
		// see all of them.
		root := "s3://" + minioBucket + "/runs/sharded"
		cfg := writeConfig(t, dir, "sharded.yaml", runConfig{tasks: source, out: root, n: n, timeScale: 0, fileRows: 1000, batchRows: 64})
		const shards = 3
		results := make([]result, shards)
		var wg sync.WaitGroup
		for i := range shards {
			wg.Add(1)
			go func() {
				defer wg.Done()
				shardEnv := append(slices.Clone(env), fmt.Sprintf("SLURM_ARRAY_TASK_ID=%d", i), fmt.Sprintf("SLURM_ARRAY_TASK_COUNT=%d", shards))
				results[i] = runExactEnv(t, shardEnv, "run", "--quiet", cfg, "--set", "source.shard=auto", "--set", "output.steps=true")
			}()
		}
		wg.Wait()
		total := 0
		for i, res := range results {
			outputs = append(outputs, res.stdout, res.stderr)
			if res.code != 0 {
				t.Fatalf("shard %d exited %d:\n%s%s", i, res.code, res.stdout, res.stderr)
			}
			want := fmt.Sprintf("%s/shards/%05d-of-%05d/data", root, i, shards)
			if !strings.Contains(res.stdout, "output: "+want) {
				t.Errorf("shard %d's summary does not name %s:\n%s", i, want, res.stdout)
			}
			var rows int
			if _, err := fmt.Sscanf(res.stdout[strings.Index(res.stdout, "rows written: "):], "rows written: %d,", &rows); err != nil {
				t.Fatalf("shard %d: no rows written line: %v\n%s", i, err, res.stdout)
			}
			total += rows
		}
		if total != tasks*n {
			t.Fatalf("the shards wrote %d rows, want %d", total, tasks*n)
		}
		keys := map[string]bool{}
		for _, o := range objects(t, client, "runs/sharded/") {
			keys[strings.TrimPrefix(o.Key, "runs/sharded/")] = true
		}
		for _, want := range []string{"manifest.json", ".trajflow.key", "shards/00000-of-00003/shard.json", "shards/00002-of-00003/data/part-00000.parquet"} {
			if !keys[want] {
				t.Errorf("bucket lacks %s: %v", want, keys)
			}
		}
		// A shard of another count is refused by the root's manifest.
		other := runExactEnv(t, append(slices.Clone(env), "SLURM_ARRAY_TASK_ID=0", "SLURM_ARRAY_TASK_COUNT=4"), "run", "--quiet", cfg, "--set", "source.shard=auto", "--set", "output.steps=true")
		outputs = append(outputs, other.stdout, other.stderr)
		if other.code != 2 || !strings.Contains(other.stderr, root+"/manifest.json") || !strings.Contains(other.stderr, "shard count: 3 → 4") {
			t.Fatalf("a shard of another count: exit %d, want 2 naming the manifest:\n%s", other.code, other.stderr)
		}
		st := runExactEnv(t, env, "stats", "--json", root)
		outputs = append(outputs, st.stdout, st.stderr)
		var m struct {
			Rows int64 `json:"rows"`
		}
		if st.code != 0 || json.Unmarshal([]byte(st.stdout), &m) != nil || m.Rows != tasks*n || !strings.Contains(st.stderr, "3 of 3 shards") {
			t.Fatalf("stats of the s3:// root: exit %d, rows %d, want %d and a shard line:\n%s%s", st.code, m.Rows, tasks*n, st.stdout, st.stderr)
		}
		mg := runExactEnv(t, env, "merge", root, "s3://"+minioBucket+"/merged-shards")
		outputs = append(outputs, mg.stdout, mg.stderr)
		if mg.code != 0 {
			t.Fatalf("merge of the s3:// root exited %d:\n%s", mg.code, mg.stderr)
		}
		merged := filepath.Join(dir, "merged-shards")
		download(t, client, "merged-shards/", merged)
		ds := readDataset(t, filepath.Join(merged, "data"))
		if len(ds.rows) != tasks*n {
			t.Fatalf("merge of the s3:// root: %d rows, want %d", len(ds.rows), tasks*n)
		}
		// The shards' step rows (output.steps) come with the merge: one
		// per turn, paired with the data files.
		if err := pqsink.PairSteps(filepath.Join(merged, "data"), filepath.Join(merged, "steps")); err != nil {
			t.Fatalf("merge of the s3:// root: %v", err)
		}
		steps, err := readback.Steps(filepath.Join(merged, "steps"))
		if err != nil {
			t.Fatal(err)
		}
		turns := 0
		for _, r := range ds.rows {
			turns += r.NumTurns
		}
		if len(steps) != turns || turns == 0 {
			t.Fatalf("merge of the s3:// root: %d step rows, want one per turn, %d", len(steps), turns)
		}
	})

	t.Run("lock", func(t *testing.T) {
		// While a run holds the prefix, a second run is refused.
		cfg := writeConfig(t, dir, "locked.yaml", runConfig{tasks: source, out: "s3://" + minioBucket + "/runs/locked", n: n, timeScale: 0.05, fileRows: 100, batchRows: 32})
		first := exec.Command(binary, "run", "--quiet", cfg)
		first.Env = env
		var firstErr bytes.Buffer
		first.Stderr = &firstErr
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = first.Process.Kill(); _ = first.Wait() }()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, err := client.StatObject(context.Background(), minioBucket, "runs/locked/.trajflow.lock", minio.StatObjectOptions{}); err == nil {
				break
			}
			if time.Now().After(deadline) {
				_ = first.Process.Signal(syscall.SIGQUIT)
				time.Sleep(time.Second)
				t.Fatalf("the first run took no lock within 30 s:\n%s", firstErr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		second := runExactEnv(t, env, "run", "--quiet", cfg)
		outputs = append(outputs, second.stdout, second.stderr)
		if second.code == 0 || !strings.Contains(second.stderr, "is in use by another trajflow run") {
			t.Fatalf("a second run on a locked prefix: exit %d:\n%s", second.code, second.stderr)
		}
		// A lock of another host: refused while its lease runs, taken over
		// once it ran out.
		other := writeConfig(t, dir, "other.yaml", runConfig{tasks: source, out: "s3://" + minioBucket + "/runs/other", n: 1, timeScale: 0, fileRows: 1000, batchRows: 64})
		plant := func(expires time.Time) {
			b, _ := json.Marshal(map[string]any{"host": "another-host", "pid": 1, "expires": expires})
			if _, err := client.PutObject(context.Background(), minioBucket, "runs/other/.trajflow.lock", bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		plant(time.Now().Add(time.Hour))
		res := runExactEnv(t, env, "run", "--quiet", other)
		if res.code == 0 || !strings.Contains(res.stderr, "host another-host") {
			t.Fatalf("a live lock of another host: exit %d:\n%s", res.code, res.stderr)
		}
		plant(time.Now().Add(-time.Second))
		res = runExactEnv(t, env, "run", "--quiet", other)
		outputs = append(outputs, res.stdout, res.stderr)
		if res.code != 0 {
			t.Fatalf("an expired lock was not taken over: exit %d:\n%s", res.code, res.stderr)
		}
	})

	t.Run("kill -9 during uploads, resume", func(t *testing.T) {
		out := "s3://" + minioBucket + "/runs/crash"
		cfg := writeConfig(t, dir, "crash.yaml", runConfig{tasks: source, out: out, n: n, timeScale: 0.05, fileRows: 100, batchRows: 32})
		rng := rand.New(rand.NewPCG(17, 0))
		landed := 0
		for k := range 3 {
			before := len(dataObjects(t, client, "runs/crash/"))
			killed, res := killAfterUploads(t, env, cfg, client, "runs/crash/", before+1+rng.IntN(3), time.Duration(rng.IntN(400))*time.Millisecond)
			outputs = append(outputs, res.stderr)
			t.Logf("kill %d: landed %v, data objects %d -> %d", k, killed, before, len(dataObjects(t, client, "runs/crash/")))
			if !killed {
				if res.code != 0 {
					t.Fatalf("run exited %d before the kill:\n%s", res.code, res.stderr)
				}
				break
			}
			landed++
			// Every object in the bucket is whole: Arrow reads each.
			part := filepath.Join(dir, fmt.Sprintf("crash-%d", k))
			download(t, client, "runs/crash/data/", part)
			readDataset(t, part)
		}
		if landed == 0 {
			t.Fatal("no kill landed before the run finished")
		}
		// A multipart upload a crash left behind is aborted by the resume.
		core := minio.Core{Client: client}
		if _, err := core.NewMultipartUpload(context.Background(), minioBucket, "runs/crash/data/part-99999.parquet", minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		res := runExactEnv(t, env, "run", "--quiet", cfg)
		outputs = append(outputs, res.stdout, res.stderr)
		if res.code != 0 || !strings.Contains(res.stdout, "resumed") {
			t.Fatalf("resume exited %d:\n%s%s", res.code, res.stdout, res.stderr)
		}
		for u := range client.ListIncompleteUploads(context.Background(), minioBucket, "runs/crash/", true) {
			t.Errorf("incomplete upload left after the resume: %+v", u)
		}
		got := filepath.Join(dir, "crash")
		download(t, client, "runs/crash/", got)
		ds := readDataset(t, filepath.Join(got, "data")) // fails on a duplicate key
		if len(ds.rows) != tasks*n {
			t.Fatalf("after %d kills and a resume: %d rows, want each of %d exactly once", landed, len(ds.rows), tasks*n)
		}
		if len(ds.fps) != 1 {
			t.Errorf("config fingerprints %v, want one", ds.fps)
		}
		scanSecret(t, got, outputs)
		scanSecret(t, filepath.Join(dir, "whole"), nil)
	})
}

// dataObjects lists the committed part objects of the data directory.
func dataObjects(t *testing.T, c *minio.Client, prefix string) []string {
	t.Helper()
	var out []string
	for _, o := range objects(t, c, prefix+"data/") {
		if strings.HasSuffix(o.Key, ".parquet") {
			out = append(out, o.Key)
		}
	}
	return out
}

// killAfterUploads starts a run and kills it with SIGKILL delay after the
// bucket holds wantParts data objects.
func killAfterUploads(t *testing.T, env []string, cfg string, c *minio.Client, prefix string, wantParts int, delay time.Duration) (bool, result) {
	t.Helper()
	cmd := exec.Command(binary, "run", "--quiet", cfg)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.After(time.Minute)
	for len(dataObjects(t, c, prefix)) < wantParts {
		select {
		case <-exited:
			return false, result{code: cmd.ProcessState.ExitCode(), stderr: stderr.String()}
		case <-deadline:
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("no upload within a minute:\n%s", stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case <-exited:
		return false, result{code: cmd.ProcessState.ExitCode(), stderr: stderr.String()}
	case <-time.After(delay):
	}
	_ = cmd.Process.Kill()
	<-exited
	return cmd.ProcessState.ExitCode() == -1, result{code: cmd.ProcessState.ExitCode(), stderr: stderr.String()}
}

// scanSecret fails when the object storage secret is in any file under
// dir or in any of texts.
func scanSecret(t *testing.T, dir string, texts []string) {
	t.Helper()
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(minioSecret)) {
			t.Errorf("%s holds the object storage secret", p)
		}
		return nil
	})
	for i, s := range texts {
		if strings.Contains(s, minioSecret) {
			t.Errorf("output %d holds the object storage secret:\n%s", i, s)
		}
	}
}
