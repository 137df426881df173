//go:build unix

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cluster is a single-node Slurm cluster (munged, slurmctld, slurmd)
// whose daemons the test started and stops.
type cluster struct {
	t     *testing.T
	dir   string   // state, spool, logs, slurm.conf
	conf  string   // slurm.conf
	env   []string // the environment of Slurm's client commands
	procs []*exec.Cmd
}

// slurmTools are the commands the Slurm test needs (Debian: slurm-wlm,
// munge).
var slurmTools = []string{"munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo", "scancel"}

// requireSlurm skips the test when Slurm or munge is not installed, or
// fails it under CI=true, where .ci/run installs them.
func requireSlurm(t *testing.T) {
	t.Helper()
	var missing []string
	for _, tool := range slurmTools {
		if _, err := lookTool(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if os.Geteuid() != 0 {
		missing = append(missing, "root (slurmd runs jobs as root here)")
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("a Slurm cluster needs %s (Debian: apt-get install slurm-wlm munge; .ci/run installs them)", strings.Join(missing, ", "))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// lookTool finds a Slurm or munge command on the PATH, or in /usr/sbin
// and /sbin (where Debian puts the daemons) when the PATH lacks them.
func lookTool(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if fi, serr := os.Stat(filepath.Join(dir, name)); serr == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return filepath.Join(dir, name), nil
		}
	}
	return "", err
}

// freePort returns a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCluster starts munged with a key of its own on a socket of its
// own, then slurmctld and slurmd in the foreground, and waits for the
// node to be idle. Everything is stopped and, if the test failed, the
// daemons' logs are printed at cleanup.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{t: t, dir: dir, conf: filepath.Join(dir, "slurm.conf")}
	for _, d := range []string{"state", "spool", "log"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.stop)

	key := make([]byte, 1024)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	keyFile, sock := filepath.Join(dir, "munge.key"), filepath.Join(dir, "munge.sock")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	c.start("munged", "-F", "--force", "--socket="+sock, "--key-file="+keyFile,
		"--log-file="+filepath.Join(dir, "log", "munged.log"), "--pid-file="+filepath.Join(dir, "munged.pid"),
		"--seed-file="+filepath.Join(dir, "munged.seed"))
	c.waitFor("munged's socket", 20*time.Second, func() bool { _, err := os.Stat(sock); return err == nil })

	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	node, _, _ := strings.Cut(host, ".")
	// cred_expire also sets how long a requeued job waits before it may
	// start again (default 120 s).
	conf := fmt.Sprintf(`ClusterName=trajflowtest
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[4]s,cred_expire=10
StateSaveLocation=%[5]s/state
SlurmdSpoolDir=%[5]s/spool
SlurmctldPidFile=%[5]s/slurmctld.pid
SlurmdPidFile=%[5]s/slurmd.pid
SlurmctldLogFile=%[5]s/log/slurmctld.log
SlurmdLogFile=%[5]s/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=30
MinJobAge=600
NodeName=%[1]s NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=%[1]s Default=YES MaxTime=INFINITE State=UP
`, node, freePort(t), freePort(t), sock, dir)
	if err := os.WriteFile(c.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	c.env = append(os.Environ(), "SLURM_CONF="+c.conf)
	c.start("slurmctld", "-D", "-i", "-f", c.conf)
	c.start("slurmd", "-D", "-f", c.conf, "-N", node)
	c.waitFor("the node to be idle", 60*time.Second, func() bool {
		out, _ := c.cmd("sinfo", "-h", "-o", "%T")
		return strings.TrimSpace(out) == "idle"
	})
	return c
}

// start starts a daemon in the foreground, its output in log/NAME.out.
func (c *cluster) start(name string, args ...string) {
	c.t.Helper()
	out, err := os.Create(filepath.Join(c.dir, "log", name+".out"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer out.Close()
	path, err := lookTool(name)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.conf)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("%s: %v", name, err)
	}
	c.procs = append(c.procs, cmd)
}

// stop cancels what is left of the jobs and stops the daemons, newest
// first; a test that failed gets the daemons' logs.
func (c *cluster) stop() {
	if c.env != nil {
		c.cmd("scancel", "--user=root")
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	if c.t.Failed() {
		for _, name := range []string{"slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out", "munged.log", "munged.out"} {
			c.t.Logf("==> %s <==\n%s", name, tail(filepath.Join(c.dir, "log", name), 60))
		}
	}
}

// cmd runs a Slurm client command against the cluster.
func (c *cluster) cmd(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), err
}

func (c *cluster) mustCmd(name string, args ...string) string {
	c.t.Helper()
	out, err := c.cmd(name, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// waitFor polls cond every 200 ms until it holds, or fails the test.
func (c *cluster) waitFor(what string, limit time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// jobStates returns JobState of each job scontrol shows for id (an array
// job: every task), keyed by "ARRAYID_TASK" or the job id.
func (c *cluster) jobStates(id string) map[string]string {
	out, err := c.cmd("scontrol", "show", "job", "-o", id)
	if err != nil {
		c.t.Logf("%v", err)
		return nil
	}
	states := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := fields(line)
		key := f["JobId"]
		if f["ArrayTaskId"] != "" && f["ArrayJobId"] != "" {
			key = f["ArrayJobId"] + "_" + f["ArrayTaskId"]
		}
		states[key] = f["JobState"]
	}
	return states
}

// fields splits a line of `scontrol show job -o` into its Key=Value
// fields.
func fields(line string) map[string]string {
	f := map[string]string{}
	for _, w := range strings.Fields(line) {
		if k, v, ok := strings.Cut(w, "="); ok {
			f[k] = v
		}
	}
	return f
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestSlurmArray runs `trajflow slurm --shards 4 --submit` on a
// single-node Slurm cluster the test starts: four array tasks on two
// CPUs, one requeued by scontrol while it runs (Slurm sends SIGTERM, as on
// preemption) and another asked to stop and requeue itself (SIGUSR1 to
// the batch shell, as --signal=B:USR1 does before the time limit). Both must
// resume from their committed files, every task must complete, and the
// merge job must then write exactly the rows of an unsharded run.
func TestSlurmArray(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a Slurm cluster and runs a sharded job (about a minute)")
	}
	requireSlurm(t)
	start := time.Now()
	c := startCluster(t)
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))

	// The run's files live under a path with a space: the scripts quote.
	dir := filepath.Join(t.TempDir(), "run dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const tasks, n = 800, 4
	taskFile := writeTasks(t, dir, tasks, 17)
	out := filepath.Join(dir, "out")
	// time_scale 0.5: a shard (200 tasks × 4) takes about 8 s, long
	// enough to be stopped after its first commits.
	cfgPath := writeConfig(t, dir, "math.yaml", runConfig{tasks: taskFile, out: out, n: n, timeScale: 0.5, fileRows: 40, batchRows: 16})

	// The reference: the same config, unsharded, in one process (a
	// smaller time_scale: timing does not change the rows).
	ref := filepath.Join(dir, "reference")
	if r := run(t, "run", cfgPath, "--set", "output.dir="+ref, "--set", "generate.sim.time_scale=0.05"); r.code != 0 {
		t.Fatalf("reference run: exit %d\n%s", r.code, r.stderr)
	}

	submit := exec.Command(binary, "slurm", cfgPath, "--shards", "4", "--submit", "--out", filepath.Join(dir, "slurm jobs"),
		"--set", "output.commit_interval=1s", "--", "--time=10:00")
	submit.Env, submit.Dir = c.env, dir
	submitOut, err := submit.CombinedOutput()
	if err != nil {
		t.Fatalf("trajflow slurm --submit: %v\n%s", err, submitOut)
	}
	t.Logf("trajflow slurm --submit:\n%s", submitOut)
	m := regexp.MustCompile(`(?m)^array job (\d+) \(4 tasks\).*\nmerge job (\d+) `).FindStringSubmatch(string(submitOut))
	if m == nil {
		t.Fatalf("no job ids in trajflow slurm's output:\n%s", submitOut)
	}
	arrayID, mergeID := m[1], m[2]
	logs := filepath.Join(dir, "slurm jobs", "logs")
	taskLog := func(i int) string { return filepath.Join(logs, fmt.Sprintf("trajflow-math-%s_%d.out", arrayID, i)) }
	defer func() {
		if t.Failed() || os.Getenv("TRAJFLOW_SLURM_TEST_LOGS") != "" {
			entries, _ := os.ReadDir(logs)
			for _, e := range entries {
				t.Logf("==> %s <==\n%s", e.Name(), tail(filepath.Join(logs, e.Name()), 40))
			}
			o, _ := c.cmd("scontrol", "show", "job")
			t.Logf("scontrol show job:\n%s", o)
		}
	}()

	// Stop two running shards midway (2 to 12 of their ~20 files
	// committed): the first by scontrol requeue, the second by SIGUSR1
	// to its batch shell.
	committed := func(shard int) int {
		m, _ := filepath.Glob(filepath.Join(out, "shards", fmt.Sprintf("%05d-of-00004", shard), "data", "part-*.parquet"))
		return len(m)
	}
	stopped := map[int]string{} // shard → how
	var requeued, selfRequeued int
	for _, how := range []string{"scontrol requeue", "SIGUSR1"} {
		shard := -1
		c.waitFor("a running shard to be midway", 90*time.Second, func() bool {
			states := c.jobStates(arrayID)
			for i := range 4 {
				task := fmt.Sprintf("%s_%d", arrayID, i)
				if k := committed(i); stopped[i] == "" && states[task] == "RUNNING" && k >= 2 && k <= 12 {
					shard = i
					return true
				}
			}
			return false
		})
		task := fmt.Sprintf("%s_%d", arrayID, shard)
		k := committed(shard)
		if how == "scontrol requeue" {
			c.mustCmd("scontrol", "requeue", task)
			requeued = shard
		} else {
			// scancel delivers the signal at once but, when the task
			// requeues itself before scancel's answer, it retries for a
			// while and exits non-zero: it is not waited for, and the
			// task's log tells what happened.
			sc := exec.Command("scancel", "--batch", "--signal=USR1", task)
			sc.Env = c.env
			if err := sc.Start(); err != nil {
				t.Fatal(err)
			}
			scancelDone := make(chan error, 1)
			go func() { scancelDone <- sc.Wait() }()
			defer func() {
				select {
				case err := <-scancelDone:
					t.Logf("scancel --batch --signal=USR1 %s: %v", task, err)
				case <-time.After(30 * time.Second):
					sc.Process.Kill()
					<-scancelDone
				}
			}()
			// Once the task has requeued itself, scancel must not retry:
			// a late delivery would reach the task's next start.
			log := filepath.Join(logs, fmt.Sprintf("trajflow-math-%s.out", task))
			c.waitFor("the signalled task to requeue itself", 60*time.Second, func() bool {
				b, _ := os.ReadFile(log)
				return strings.Contains(string(b), "trajflow-slurm: requeueing")
			})
			_ = sc.Process.Kill()
			selfRequeued = shard
		}
		stopped[shard] = how
		t.Logf("shard %d stopped by %s after %d committed files (%v)", shard, how, k, time.Since(start).Round(time.Millisecond))
	}

	c.waitFor("the merge job to end", 150*time.Second, func() bool {
		s := c.jobStates(mergeID)[mergeID]
		if s == "COMPLETED" {
			return true
		}
		if s == "FAILED" || s == "CANCELLED" || s == "TIMEOUT" || s == "OUT_OF_MEMORY" || s == "NODE_FAIL" {
			t.Fatalf("merge job %s: %s\n%s", mergeID, s, tail(filepath.Join(logs, "trajflow-math-merge-"+mergeID+".out"), 20))
		}
		for task, ts := range c.jobStates(arrayID) {
			if ts == "FAILED" || ts == "CANCELLED" || ts == "TIMEOUT" {
				t.Fatalf("array task %s: %s", task, ts)
			}
		}
		return false
	})
	t.Logf("merge job done at %v", time.Since(start).Round(time.Millisecond))

	for task, s := range c.jobStates(arrayID) {
		if s != "COMPLETED" {
			t.Errorf("array task %s: %s, want COMPLETED", task, s)
		}
	}
	// The stopped shards ran twice and their second run resumed from
	// what the first committed; the others ran once.
	resumed := regexp.MustCompile(`resumed: (\d+) tasks already committed were skipped`)
	for i := range 4 {
		b, err := os.ReadFile(taskLog(i))
		if err != nil {
			t.Fatal(err)
		}
		log := string(b)
		starts := strings.Count(log, "trajflow-slurm: task "+strconv.Itoa(i)+" of 4,")
		if stopped[i] != "" {
			if starts != 2 || !strings.Contains(log, "start 2,") || !strings.Contains(log, "trajflow exited 130") {
				t.Errorf("shard %d (%s): want two starts, the first stopped with 130; log:\n%s", i, stopped[i], log)
			}
			mr := resumed.FindStringSubmatch(log)
			k, _ := strconv.Atoi(safe(mr, 1))
			if k == 0 {
				t.Errorf("shard %d (%s): its second run did not resume committed tasks; log:\n%s", i, stopped[i], log)
			}
			t.Logf("shard %d (%s): its second run skipped %d committed tasks of %d", i, stopped[i], k, tasks/4)
		} else if starts != 1 || resumed.MatchString(log) {
			t.Errorf("shard %d: want one start without a resume; log:\n%s", i, log)
		}
	}
	if b, _ := os.ReadFile(taskLog(selfRequeued)); !strings.Contains(string(b), fmt.Sprintf("requeueing %s_%d", arrayID, selfRequeued)) {
		t.Errorf("shard %d did not requeue itself on SIGUSR1:\n%s", selfRequeued, b)
	}
	if b, _ := os.ReadFile(taskLog(requeued)); strings.Contains(string(b), "requeueing") {
		t.Errorf("shard %d, requeued by scontrol, requeued itself too:\n%s", requeued, b)
	}

	// The merged dataset is the unsharded run's, row for row.
	want := readDataset(t, filepath.Join(ref, "data"))
	got := readDataset(t, filepath.Join(out, "merged", "data"))
	if len(want.rows) != tasks*n {
		t.Fatalf("reference has %d rows, want %d", len(want.rows), tasks*n)
	}
	if len(got.rows) != len(want.rows) {
		t.Errorf("merged %d rows, want %d", len(got.rows), len(want.rows))
	}
	diffs := 0
	for k, w := range want.rows {
		g, ok := got.rows[k]
		if !ok {
			t.Errorf("key %+v missing from the merged dataset", k)
		} else if !reflect.DeepEqual(deterministic(g), deterministic(w)) {
			t.Errorf("key %+v: merged row differs from the unsharded run's", k)
		} else {
			continue
		}
		if diffs++; diffs > 5 {
			t.Fatal("more differences left out")
		}
	}
	t.Logf("done in %v", time.Since(start).Round(time.Millisecond))
}

// safe returns m[i], or "" when m is too short.
func safe(m []string, i int) string {
	if i < len(m) {
		return m[i]
	}
	return ""
}
