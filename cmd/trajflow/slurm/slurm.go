package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Job is what the two scripts are made of. Paths are absolute.
type Job struct {
	Name        string   // job name of the array job; the merge job adds "-merge"
	Binary      string   // the trajflow binary
	Config      string   // the config file
	Sets        []string // --set overrides passed to trajflow run (section.key=value)
	Shards      int      // array tasks, one per shard (>= 1)
	MaxParallel int      // tasks running at once (the array's %M); 0: no limit
	Dir         string   // working directory of both jobs (relative paths of the config resolve from it)
	Logs        string   // directory of the jobs' output files
	Output      string   // the run's output.dir, the root the merge job reads
	MergeOut    string   // where the merge job writes the merged dataset
	// SignalSeconds is how long before its time limit Slurm sends
	// SIGUSR1 to an array task's batch shell, which then stops trajflow
	// and requeues the task.
	SignalSeconds int
	Options       []Option // sbatch options for both jobs, as the user gave them
}

// Option is one sbatch option as its words: ["--partition=gpu"],
// ["--time", "2:00:00"] or ["-p", "gpu"].
type Option []string

// reserved are the sbatch options the scripts set themselves, with their
// short forms.
var reserved = map[string]string{
	"--array": "", "-a": "--array",
	"--dependency": "", "-d": "--dependency",
	"--output": "", "-o": "--output",
	"--error": "", "-e": "--error",
	"--open-mode": "",
	"--requeue":   "", "--no-requeue": "",
	"--signal": "",
	"--chdir":  "", "-D": "--chdir",
	"--parsable": "", "--wrap": "",
}

// Name returns the option's name in its long form when it is one of those
// the scripts care about ("--job-name" for "-J"), else as given.
func (o Option) Name() string {
	if len(o) == 0 {
		return ""
	}
	n, _, _ := strings.Cut(o[0], "=")
	if long := reserved[n]; long != "" {
		return long
	}
	if n == "-J" {
		return "--job-name"
	}
	return n
}

// ParseOptions groups sbatch options given as words: a word starting with
// "-" starts an option and the words after it, up to the next such word,
// are its values ("--time 2:00:00", "-p gpu"). Options the scripts set
// themselves (--array, --dependency, --output, --error, --open-mode,
// --requeue, --no-requeue, --signal, --chdir, --parsable, --wrap) are
// refused; --job-name replaces the default name.
func ParseOptions(words []string) ([]Option, error) {
	var opts []Option
	for _, w := range words {
		if strings.ContainsAny(w, "\"\n\r\x00") {
			return nil, fmt.Errorf("sbatch option %q: a double quote or line break cannot be written in an #SBATCH line", w)
		}
		if strings.HasPrefix(w, "-") && len(w) > 1 {
			opts = append(opts, Option{w})
			continue
		}
		if len(opts) == 0 {
			return nil, fmt.Errorf("sbatch option %q: an option starts with - (e.g. --partition=gpu)", w)
		}
		opts[len(opts)-1] = append(opts[len(opts)-1], w)
	}
	for _, o := range opts {
		name := o.Name()
		if _, ok := reserved[name]; ok {
			return nil, fmt.Errorf("sbatch option %s: trajflow slurm sets it in the scripts; see docs/slurm.md", strings.Join(o, " "))
		}
	}
	return opts, nil
}

// check reports a Job the scripts cannot be written from.
func (j *Job) check() error {
	if j.Shards < 1 {
		return fmt.Errorf("--shards must be >= 1, got %d", j.Shards)
	}
	if j.MaxParallel < 0 {
		return fmt.Errorf("--max-parallel must be >= 1, got %d", j.MaxParallel)
	}
	for _, p := range []struct{ what, v string }{
		{"job name", j.Name}, {"the trajflow binary's path", j.Binary}, {"the config's path", j.Config},
		{"the working directory", j.Dir}, {"the log directory", j.Logs},
		{"output.dir", j.Output}, {"the merge output", j.MergeOut},
	} {
		if p.v == "" {
			return fmt.Errorf("%s is empty", p.what)
		}
		if strings.ContainsAny(p.v, "\"\n\r\x00") {
			return fmt.Errorf("%s %q: a double quote or line break cannot be written in an #SBATCH line", p.what, p.v)
		}
	}
	for _, s := range j.Sets {
		if strings.ContainsAny(s, "\x00") {
			return fmt.Errorf("--set %q: holds a NUL byte", s)
		}
	}
	return nil
}

// Array returns the text of the array job's batch script.
func (j *Job) Array() (string, error) {
	if err := j.check(); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("#!/bin/bash\n")
	b.WriteString("# The shards of a trajflow run as a Slurm array job, written by `trajflow slurm`.\n")
	b.WriteString("# Task i runs shard i of " + strconv.Itoa(j.Shards) + " (source.shard=auto reads SLURM_ARRAY_TASK_ID\n")
	b.WriteString("# and SLURM_ARRAY_TASK_COUNT) and writes OUTPUT/shards/iiiii-of-nnnnn/.\n")
	array := fmt.Sprintf("0-%d", j.Shards-1)
	if j.MaxParallel > 0 {
		array += "%" + strconv.Itoa(j.MaxParallel)
	}
	j.directives(&b, j.Name, "%x-%A_%a.out",
		Option{"--array=" + array},
		Option{"--requeue"},
		Option{fmt.Sprintf("--signal=B:USR1@%d", j.SignalSeconds)})
	b.WriteString(`
# Slurm sends SIGTERM to every process of the job before it kills it
# (scontrol requeue, preemption, scancel): trajflow gets it directly,
# stops, commits every finished group and exits 130; this shell only waits
# for it. A requeued task runs this script again, and trajflow resumes from
# the shard's committed files.
#
# SIGUSR1 reaches this shell alone (--signal=B:USR1 before the time limit,
# or scancel --batch --signal=USR1): it passes SIGTERM to trajflow and,
# once trajflow has stopped, requeues this task so that it resumes.
set -u
child=
requeue=0
woke=0
trap 'woke=1' TERM
trap 'woke=1; requeue=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null' USR1
echo "trajflow-slurm: task ${SLURM_ARRAY_TASK_ID:-?} of ${SLURM_ARRAY_TASK_COUNT:-?}, job ${SLURM_JOB_ID:-?}, start $((${SLURM_RESTART_COUNT:-0} + 1)), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
`)
	b.WriteString(shellQuote(j.Binary) + " run " + shellQuote(j.Config) + " --set source.shard=auto")
	for _, s := range j.Sets {
		b.WriteString(" --set " + shellQuote(s))
	}
	b.WriteString(` &
child=$!
# wait returns early when a trapped signal arrives: wait again until it
# returns trajflow's own exit status.
while :; do
  woke=0
  wait "$child"
  rc=$?
  [ "$woke" = 1 ] || break
done
echo "trajflow-slurm: trajflow exited $rc"
if [ "$requeue" = 1 ] && [ "$rc" != 0 ]; then
  echo "trajflow-slurm: requeueing ${SLURM_ARRAY_JOB_ID:-?}_${SLURM_ARRAY_TASK_ID:-?}; it resumes where it stopped"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$rc"
`)
	return b.String(), nil
}

// Merge returns the text of the merge job's batch script. Its dependency
// on the array job is given to sbatch when it is submitted, since the
// array job's id is not known before.
func (j *Job) Merge() (string, error) {
	if err := j.check(); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("#!/bin/bash\n")
	b.WriteString("# Merges the shards of a trajflow run, written by `trajflow slurm`. Submit it with\n")
	b.WriteString("# sbatch --dependency=afterok:ARRAY_JOB_ID: it runs once every array task completed.\n")
	j.directives(&b, j.Name+"-merge", "%x-%j.out", Option{"--requeue"})
	b.WriteString("# trajflow merge refuses a root whose shards are missing or incomplete\n")
	b.WriteString("# against its manifest, and commits DEST whole (written beside it, renamed).\n")
	b.WriteString("exec " + shellQuote(j.Binary) + " merge --out " + shellQuote(j.MergeOut) + " " + shellQuote(j.Output) + "\n")
	return b.String(), nil
}

// directives writes the #SBATCH lines common to both scripts, then own,
// then the user's options.
func (j *Job) directives(b *strings.Builder, name, logName string, own ...Option) {
	line := func(words ...string) {
		b.WriteString("#SBATCH")
		for _, w := range words {
			b.WriteString(" " + directiveQuote(w))
		}
		b.WriteString("\n")
	}
	custom := false
	for _, o := range j.Options {
		custom = custom || o.Name() == "--job-name"
	}
	if !custom {
		line("--job-name=" + name)
	}
	for _, o := range own {
		line(o...)
	}
	line("--open-mode=append")
	// Slurm expands %x, %A, %a, %j in --output; a literal % is %%.
	line("--output=" + strings.ReplaceAll(strings.TrimSuffix(j.Logs, "/"), "%", "%%") + "/" + logName)
	line("--chdir=" + j.Dir)
	for _, o := range j.Options {
		line(o...)
	}
}

// directiveQuote quotes an #SBATCH word holding blanks: sbatch splits the
// line at blanks outside double quotes.
func directiveQuote(w string) string {
	if !strings.ContainsAny(w, " \t'\\#$") {
		return w
	}
	if name, v, ok := strings.Cut(w, "="); ok && strings.HasPrefix(name, "-") {
		return name + `="` + v + `"`
	}
	return `"` + w + `"`
}

// shellQuote quotes s for bash: single quotes, each ' as '\”.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ShellQuote is shellQuote for a caller printing commands to run.
func ShellQuote(s string) string { return shellQuote(s) }

// ParseJobID reads the job id from sbatch --parsable's answer: "12345"
// or "12345;cluster", with a trailing newline.
func ParseJobID(out string) (string, error) {
	s := strings.TrimSpace(out)
	id, _, _ := strings.Cut(s, ";")
	if id == "" {
		return "", fmt.Errorf("sbatch --parsable printed no job id (%q)", out)
	}
	if len(id) > 20 || strings.Trim(id, "0123456789") != "" {
		return "", fmt.Errorf("sbatch --parsable printed %q, not a job id", out)
	}
	return id, nil
}

// Submit runs `sbatch --parsable [--dependency=afterok:AFTER] SCRIPT` and
// returns the job id. sbatch is the command's path or name.
func Submit(ctx context.Context, sbatch, script, after string) (string, error) {
	args := []string{"--parsable"}
	if after != "" {
		args = append(args, "--dependency=afterok:"+after)
	}
	args = append(args, script)
	cmd := exec.CommandContext(ctx, sbatch, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("sbatch %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return "", fmt.Errorf("sbatch: %w", err)
	}
	return ParseJobID(stdout.String())
}

// ParseTime reads a Slurm time limit (sbatch --time): "minutes",
// "minutes:seconds", "hours:minutes:seconds", "days-hours",
// "days-hours:minutes" or "days-hours:minutes:seconds". "UNLIMITED",
// "INFINITE" and "-1" are no limit: 0.
func ParseTime(s string) (time.Duration, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "UNLIMITED", "INFINITE", "-1":
		return 0, nil
	}
	bad := fmt.Errorf("time limit %q: want minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes or days-hours:minutes:seconds", s)
	num := func(v string) (int64, bool) {
		if v == "" || len(v) > 9 || strings.Trim(v, "0123456789") != "" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	var days int64
	rest := s
	if d, r, ok := strings.Cut(s, "-"); ok {
		n, ok := num(d)
		if !ok {
			return 0, bad
		}
		days, rest = n, r
	}
	parts := strings.Split(rest, ":")
	vals := make([]int64, len(parts))
	for i, p := range parts {
		n, ok := num(p)
		if !ok {
			return 0, bad
		}
		vals[i] = n
	}
	var sec int64
	switch {
	case days > 0 || strings.Contains(s, "-"):
		// days-hours[:minutes[:seconds]]
		if len(vals) > 3 {
			return 0, bad
		}
		mult := []int64{3600, 60, 1}
		for i, v := range vals {
			sec += v * mult[i]
		}
		sec += days * 86400
	case len(vals) == 1: // minutes
		sec = vals[0] * 60
	case len(vals) == 2: // minutes:seconds
		sec = vals[0]*60 + vals[1]
	case len(vals) == 3: // hours:minutes:seconds
		sec = vals[0]*3600 + vals[1]*60 + vals[2]
	default:
		return 0, bad
	}
	if sec > maxTimeLimit {
		return 0, fmt.Errorf("time limit %q: over 100 years", s)
	}
	return time.Duration(sec) * time.Second, nil
}

// maxTimeLimit is the longest time limit ParseTime takes, in seconds.
const maxTimeLimit = 100 * 365 * 86400

// TimeLimit returns the --time (-t) the options give, and whether they
// give one.
func TimeLimit(opts []Option) (string, bool) {
	v, found := "", false
	for _, o := range opts {
		if n := o.Name(); n != "--time" && n != "-t" {
			continue
		}
		if _, val, ok := strings.Cut(o[0], "="); ok {
			v, found = val, true
		} else if len(o) > 1 {
			v, found = o[1], true
		}
	}
	return v, found
}
