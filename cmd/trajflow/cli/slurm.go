package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/trajflow/trajflow/cmd/trajflow/slurm"
	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/storage"
)

const slurmUsage = `Usage: trajflow slurm CONFIG.yaml --shards N [--max-parallel M] [--submit]
                     [--out DIR] [--set section.key=value ...] [--sbatch OPT ...] [-- SBATCH OPTIONS]

Writes two Slurm batch scripts for a sharded run: DIR/array.sh, an array
job of N tasks (--array=0-(N-1)%M) each running
  trajflow run CONFIG --set source.shard=auto [--set ...]
and DIR/merge.sh, which runs trajflow merge on the run's output once every
task completed (submitted with --dependency=afterok:ARRAY_JOB_ID). Tasks
are requeueable: a preempted or requeued task stops gracefully and resumes
where it stopped. The config is checked first (as trajflow run would, with
source.shard=auto); nothing is written when it is bad.

  --shards N              array tasks, one per shard (required)
  --max-parallel M        tasks running at once (default: no limit)
  --submit                submit both with sbatch and print the job ids;
                          without it, print the sbatch commands to run
  --out DIR               where the scripts go (default: CONFIG's name
                          + "-slurm", in the working directory); the jobs'
                          logs go to DIR/logs
  --merge-out DIR         where the merge job writes the merged dataset
                          (default: OUTPUT/merged, OUTPUT being output.dir)
  --set section.key=value passed to trajflow run, repeatable
  --sbatch OPT            an sbatch option for both jobs, repeatable
                          (--sbatch --partition=cpu --sbatch --time=4:00:00)
  --binary PATH           the trajflow binary the jobs run (default: this one)
  -- OPTIONS              every word after -- is sbatch options for both jobs

A task is signalled to stop and requeue itself max(60, run.grace + 30) s
before its time limit; a --time that leaves less is refused.

Run "trajflow slurm" where the cluster's nodes see the same paths: the jobs
start in the current directory and use absolute paths. See docs/slurm.md.
`

func slurmCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var sbatchWords []string
	if i := indexOf(args, "--"); i >= 0 {
		sbatchWords = append(sbatchWords, args[i+1:]...)
		args = args[:i]
	}
	var (
		shards, maxParallel   int
		submit                bool
		outDir, mergeOut, bin string
		badFlag               string
	)
	intFlag := func(name, v string, ok bool, min int) (int, bool) {
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < min {
			badFlag = fmt.Sprintf("%s needs a whole number >= %d", name, min)
			return 0, false
		}
		return n, true
	}
	path, sets, code := configArgs("slurm", slurmUsage, args, stdout, stderr, func(a string, next func() (string, bool)) (bool, int) {
		name, _, _ := strings.Cut(a, "=")
		str := func(dst *string) (bool, int) {
			v, ok := next()
			if !ok || v == "" {
				badFlag = name + " needs a value"
				return true, ExitUsage
			}
			*dst = v
			return true, -1
		}
		switch name {
		case "--shards":
			v, ok := next()
			if n, ok := intFlag(name, v, ok, 1); ok {
				shards = n
				return true, -1
			}
			return true, ExitUsage
		case "--max-parallel":
			v, ok := next()
			if n, ok := intFlag(name, v, ok, 1); ok {
				maxParallel = n
				return true, -1
			}
			return true, ExitUsage
		case "--submit":
			submit = true
			return true, -1
		case "--out":
			return str(&outDir)
		case "--merge-out":
			return str(&mergeOut)
		case "--binary":
			return str(&bin)
		case "--sbatch":
			var v string
			took, c := str(&v)
			sbatchWords = append(sbatchWords, v)
			return took, c
		}
		return false, -1
	})
	if badFlag != "" {
		fmt.Fprintf(stderr, "trajflow slurm: %s\n\n%s", badFlag, slurmUsage)
		return ExitUsage
	}
	if code >= 0 {
		return code
	}
	if shards == 0 {
		fmt.Fprintf(stderr, "trajflow slurm: --shards N is required\n\n%s", slurmUsage)
		return ExitUsage
	}
	opts, err := slurm.ParseOptions(sbatchWords)
	if err != nil {
		fmt.Fprintln(stderr, "trajflow slurm:", err)
		return ExitUsage
	}

	for _, s := range sets {
		if k, _, _ := strings.Cut(s, "="); k == "source.shard" || strings.HasPrefix(k, "source.shard.") {
			fmt.Fprintf(stderr, "trajflow slurm: --set %s: each array task takes its shard from Slurm (source.shard=auto); leave source.shard out\n", s)
			return ExitUsage
		}
	}
	// A config sharded by hand would be sharded again by the array.
	if own, err := config.Read(path, sets); err == nil && !own.Source.Shard.Auto && own.Source.Shard.Count > 1 {
		fmt.Fprintf(stderr, "trajflow slurm: %s: source.shard is index %d of %d; the array gives each task its shard (source.shard=auto): remove source.shard\n",
			path, own.Source.Shard.Index, own.Source.Shard.Count)
		return ExitUsage
	}
	// The config as every task will run it.
	runSets := append([]string{"source.shard=auto"}, sets...)
	cfg, err := config.Read(path, runSets)
	if err == nil {
		// Checked as the array's first task will see it: its shard from
		// Slurm's variables alone.
		task := map[string]string{"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": strconv.Itoa(shards)}
		err = runner.Check(cfg, runner.Options{LookupEnv: func(k string) (string, bool) { v, ok := task[k]; return v, ok }})
	}
	if err != nil {
		fmt.Fprintln(stderr, "trajflow slurm:", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitUsage
	}

	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(stderr, "trajflow slurm:", err)
		return ExitFailed
	}
	abs := func(p string) string {
		if storage.IsURL(p) {
			return p // s3://bucket/prefix: not a path
		}
		if filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		return filepath.Join(wd, p)
	}
	if bin == "" {
		if bin, err = os.Executable(); err == nil {
			bin, err = filepath.EvalSymlinks(bin)
		}
		if err != nil {
			fmt.Fprintln(stderr, "trajflow slurm: the trajflow binary's path:", err, "(give --binary)")
			return ExitFailed
		}
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if outDir == "" {
		outDir = name + "-slurm"
	}
	output := abs(cfg.Output.Dir)
	if mergeOut == "" {
		mergeOut = storage.Join(output, "merged")
	}
	grace := int(math.Ceil(cfg.Run.Grace.D().Seconds()))
	if grace >= 30 {
		fmt.Fprintf(stderr, "trajflow slurm: note: run.grace is %s; Slurm kills a requeued or preempted task KillWait (default 30s) or GraceTime after its SIGTERM, so a stop may not finish its last commit (it is redone on resume); a shorter run.grace, e.g. --set run.grace=20s, avoids it (docs/slurm.md)\n", cfg.Run.Grace.D())
	}
	job := &slurm.Job{
		Name:          "trajflow-" + name,
		Binary:        abs(bin),
		Config:        abs(path),
		Sets:          sets,
		Shards:        shards,
		MaxParallel:   maxParallel,
		Dir:           wd,
		Logs:          filepath.Join(abs(outDir), "logs"),
		Output:        output,
		MergeOut:      abs(mergeOut),
		SignalSeconds: max(60, grace+30),
		Options:       opts,
	}
	// A time limit within the signal time would signal each task as it
	// starts (Slurm may signal up to 60 s early): every start would stop
	// and requeue at once.
	if v, ok := slurm.TimeLimit(opts); ok {
		if d, err := slurm.ParseTime(v); err == nil && d > 0 && d <= time.Duration(job.SignalSeconds+60)*time.Second {
			fmt.Fprintf(stderr, "trajflow slurm: sbatch --time %s: the tasks are signalled to stop and requeue %d s before their time limit (run.grace %s + 30 s, at least 60 s; Slurm may signal 60 s earlier): give a --time above %s\n",
				v, job.SignalSeconds, cfg.Run.Grace.D(), time.Duration(job.SignalSeconds+60)*time.Second)
			return ExitUsage
		}
	}
	array, err := job.Array()
	var merge string
	if err == nil {
		merge, err = job.Merge()
	}
	if err != nil {
		fmt.Fprintln(stderr, "trajflow slurm:", err)
		return ExitUsage
	}
	arrayPath, mergePath := filepath.Join(abs(outDir), "array.sh"), filepath.Join(abs(outDir), "merge.sh")
	if err := os.MkdirAll(job.Logs, 0o755); err != nil {
		fmt.Fprintln(stderr, "trajflow slurm:", err)
		return ExitFailed
	}
	for _, f := range []struct{ path, text string }{{arrayPath, array}, {mergePath, merge}} {
		if err := durable.WriteFile(f.path, []byte(f.text), 0o755); err != nil {
			fmt.Fprintln(stderr, "trajflow slurm:", err)
			return ExitFailed
		}
	}
	if !submit {
		fmt.Fprintf(stdout, "wrote %s (%d tasks) and %s; logs go to %s\nsubmit them with:\n", arrayPath, shards, mergePath, job.Logs)
		fmt.Fprintf(stdout, "  jid=$(sbatch --parsable %s) && sbatch --dependency=afterok:${jid%%%%;*} %s\n",
			slurm.ShellQuote(arrayPath), slurm.ShellQuote(mergePath))
		return ExitOK
	}
	sbatch, err := exec.LookPath("sbatch")
	if err != nil {
		fmt.Fprintf(stderr, "trajflow slurm: --submit: %v; the scripts are %s and %s\n", err, arrayPath, mergePath)
		return ExitFailed
	}
	arrayID, err := slurm.Submit(ctx, sbatch, arrayPath, "")
	if err != nil {
		fmt.Fprintln(stderr, "trajflow slurm:", err)
		return ExitFailed
	}
	mergeID, err := slurm.Submit(ctx, sbatch, mergePath, arrayID)
	if err != nil {
		fmt.Fprintf(stderr, "trajflow slurm: the array job %s is submitted, the merge job is not: %v\n  submit it with: sbatch --dependency=afterok:%s %s\n",
			arrayID, err, arrayID, slurm.ShellQuote(mergePath))
		return ExitFailed
	}
	fmt.Fprintf(stdout, "array job %s (%d tasks): %s\nmerge job %s (after array job %s): %s\nlogs: %s\n",
		arrayID, shards, arrayPath, mergeID, arrayID, mergePath, job.Logs)
	return ExitOK
}

// indexOf returns the index of s in list, or -1.
func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}
