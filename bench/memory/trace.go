package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/trajflow/trajflow/bench/internal/harness"
)

// traceChild runs `trajflow run CONFIG --quiet SETS…` like harness.RunChild
// and also samples the child's VmRSS every interval into dir/rss-TAG.csv
// (seconds since start, RSS MiB) and writes its stderr (with gctrace, the
// runtime's GC trace) to dir/stderr-TAG.log.
func traceChild(ctx context.Context, dir, tag string, every time.Duration, gctrace bool, config string, sets ...string) (harness.ChildRun, error) {
	args := []string{"run", config, "--quiet"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd, err := harness.Child(ctx, args...)
	if err != nil {
		return harness.ChildRun{}, err
	}
	if gctrace {
		cmd.Env = append(cmd.Env, "GODEBUG=gctrace=1")
	}
	logf, err := os.Create(filepath.Join(dir, "stderr-"+tag+".log"))
	if err != nil {
		return harness.ChildRun{}, err
	}
	defer func() { _ = logf.Close() }() // best effort: a benchmark's trace
	csv, err := os.Create(filepath.Join(dir, "rss-"+tag+".csv"))
	if err != nil {
		return harness.ChildRun{}, err
	}
	defer func() { _ = csv.Close() }() // best effort: a benchmark's trace
	var stdout strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return harness.ChildRun{}, err
	}
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		w := bufio.NewWriter(csv)
		defer func() { _ = w.Flush() }() // best effort: a benchmark's trace
		fmt.Fprintln(w, "t_s,rss_mib")
		status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if kb, ok := vmRSS(status); ok && kb > 0 { // 0 while the child execs
				fmt.Fprintf(w, "%.3f,%.3f\n", time.Since(start).Seconds(), float64(kb)/1024) // kB precision: a child still exec-ing holds a few kB
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	<-sampled
	res := harness.ChildRun{Wall: time.Since(start), Stdout: stdout.String()}
	if ps := cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			res.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			res.MaxRSS = ru.Maxrss * 1024
		}
	}
	if err != nil {
		return res, fmt.Errorf("trajflow run: %w (stderr in %s)", err, logf.Name())
	}
	return res, nil
}

// vmRSS reads the VmRSS line (kB) of a /proc/PID/status file.
func vmRSS(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range bytes.Lines(data) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := strings.Fields(string(rest))
			if len(f) > 0 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb, err == nil
			}
		}
	}
	return 0, false
}
