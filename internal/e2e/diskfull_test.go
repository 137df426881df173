package e2e

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/trajflow/trajflow/internal/crashfs"
	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
)

// The disk-fault trials: quick-start runs on a crashfs mount whose disk
// fills, or fails an operation with EIO, at a random point of the run.
const (
	fullPoints = 12 // full disks
	eioPoints  = 12 // I/O errors
	faultSeed  = 20261208
)

var (
	groupsRe    = regexp.MustCompile(`(?m)^groups: (\d+) finished, (\d+) kept(?: \((\d+) of them committed)?`)
	neededRe    = regexp.MustCompile(`\(writing (\S+) needed at least [0-9.]+ (?:bytes|KiB|MiB|GiB): its \d+ bytes, the refused write's included\) and run the same command again to resume`)
	exitDiskMsg = regexp.MustCompile(`(?m)^trajflow run: (the disk is full \(no space left on device\)|an I/O error of the disk \(EIO\)) at (\S+?): `)
)

// TestDiskFaultResume: a run whose disk fills at a random byte (crashfs
// SetFree) or whose write, fsync or rename of a random commit fails with
// EIO stops with exit code 5 and a message naming the fault, a path in
// the output directory and what to do; its summary counts as committed
// only the groups of the files committed (rows written = committed
// groups × n); every part under a final name reads back, each key once,
// with as many rows as the run reported, before and after a power cut
// that follows; no fsync that failed is retried on its descriptor; and
// once the space is freed (the fault cleared) a resume completes with
// every (task, rollout) exactly once.
func TestDiskFaultResume(t *testing.T) {
	if testing.Short() {
		t.Skip("disk-fault trials: 48 simulated runs on a FUSE mount (skipped under -short)")
	}
	fsys := crashfstest.Mount(t)
	dir := t.TempDir()
	tasks := writeTasks(t, dir, cutTasks, 3)
	rng := rand.New(rand.NewPCG(faultSeed, 0))
	// A whole run measures the bytes a run writes.
	calib := filepath.Join(fsys.Root(), "whole")
	if res := run(t, "run", writeCutConfig(t, dir, "whole.yaml", tasks, calib)); res.code != 0 {
		t.Fatalf("a run without faults exited %d:\n%s", res.code, res.stderr)
	}
	total := fsys.Stats().Written
	eio := []crashfs.Fault{
		{Op: crashfs.Write, Match: ".part-*"},
		{Op: crashfs.Fsync, Match: ".part-*"},
		{Op: crashfs.Rename, Match: ".part-*"},
		{Op: crashfs.Fsync, Match: "data"},
		{Op: crashfs.Write, Match: ".rollouts-*"},
		{Op: crashfs.Fsync, Match: ".rollouts-*"},
		{Op: crashfs.Write, Match: "inputs.jsonl"},
		{Op: crashfs.Fsync, Match: "inputs.jsonl"},
	}
	var stopped, finished, rows, committed int
	for i := range fullPoints + eioPoints {
		out := filepath.Join(fsys.Root(), fmt.Sprintf("run%02d", i))
		cfg := writeCutConfig(t, dir, fmt.Sprintf("run%02d.yaml", i), tasks, out)
		var name, want string
		if i < fullPoints {
			free := rng.Int64N(total)
			name, want = fmt.Sprintf("disk full after %d of %d bytes", free, total), "no space left on device"
			fsys.SetFree(free)
		} else {
			ft := eio[i%len(eio)]
			ft.Err, ft.Skip, ft.Count = syscall.EIO, rng.IntN(4), 1
			name, want = fmt.Sprintf("EIO of %v %s after %d", ft.Op, ft.Match, ft.Skip), "I/O error"
			fsys.Inject(ft)
		}
		res := run(t, "run", cfg)
		fsys.ClearFaults()
		if res.code == 0 {
			// The fault came after the last commit (or matched nothing).
			t.Logf("%s: the run finished", name)
			checkWhole(t, out)
			finished++
			continue
		}
		stopped++
		if res.code != 5 {
			t.Fatalf("%s: exit %d, want 5:\n%s", name, res.code, res.stderr)
		}
		m := exitDiskMsg.FindStringSubmatch(res.stderr)
		if m == nil || !strings.Contains(m[1], want) || !strings.HasPrefix(m[2], out+"/") ||
			!strings.Contains(res.stderr, "run the same command again") || strings.Contains(res.stderr, "parquet: parquet:") {
			t.Errorf("%s: the message does not name the fault (%q), a path under %s and what to do:\n%s", name, want, out, res.stderr)
		}
		// A full disk says which file needed how many bytes.
		if i < fullPoints {
			if n := neededRe.FindStringSubmatch(res.stderr); n == nil || !strings.HasPrefix(n[1], out+"/") {
				t.Errorf("%s: the message does not say which file under %s needed how much space:\n%s", name, out, res.stderr)
			}
		}
		reported := 0
		if m := rowsWrittenRe.FindStringSubmatch(res.stdout); m != nil {
			reported, _ = strconv.Atoi(m[1])
		}
		g := groupsRe.FindStringSubmatch(res.stdout)
		if g == nil {
			t.Fatalf("%s: no groups line in the summary:\n%s", name, res.stdout)
		}
		kept, _ := strconv.Atoi(g[2])
		groups := kept
		if g[3] != "" {
			groups, _ = strconv.Atoi(g[3])
		}
		if groups*cutN != reported {
			t.Errorf("%s: the summary says %d groups committed (%d kept) and %d rows written (%d a group):\n%s", name, groups, kept, reported, cutN, res.stdout)
		}
		for _, when := range []string{"after the fault", "after a power cut"} {
			if when == "after a power cut" {
				if err := fsys.Cut(); err != nil {
					t.Fatal(err)
				}
			}
			n, ok := checkSurvived(t, out, name+" "+when)
			if !ok || n < reported {
				t.Fatalf("%s %s: %d rows read back, the run reported %d committed", name, when, n, reported)
			}
		}
		res = run(t, "run", cfg)
		if res.code != 0 {
			t.Fatalf("%s: the resume after the fault exited %d:\n%s", name, res.code, res.stderr)
		}
		checkWhole(t, out)
		t.Logf("%s: stopped with %d rows (%d groups) committed, resumed to %d", name, reported, groups, cutTasks*cutN)
		rows += cutTasks * cutN
		committed += reported
	}
	st := fsys.Stats()
	if st.RetriedSyncs != 0 {
		t.Errorf("%d fsyncs retried on a descriptor whose fsync had failed", st.RetriedSyncs)
	}
	if stopped < (fullPoints+eioPoints)*2/3 {
		t.Errorf("only %d of %d runs met their fault", stopped, fullPoints+eioPoints)
	}
	t.Logf("%d runs stopped by a fault (%d writes failed for space, %d operations with EIO), %d finished first; %d rows committed before the faults, all found; %d rows checked after the resumes; 0 lost",
		stopped, st.NoSpace, st.Injected, finished, committed, rows)
}
