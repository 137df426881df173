// Command soak runs a long simulated run in-process (1M rollouts by
// default, on the instant simulator) and samples its goroutines, resident
// memory and Go heap every few seconds: a streaming pipeline's must stay
// flat, whatever its length. It exits 1 when the second half of the run
// holds more goroutines, or 25% more RSS, than the first half after its
// warm-up. Not run by CI (minutes); docs/reliability.md has its figures.
//
//	go run ./bench/soak                      # 125000 tasks × 8 = 1M rollouts
//	go run ./bench/soak -tasks 20000         # a shorter soak
//	go run ./bench/soak -commit-interval 2s  # many timer commits
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/trajflow/trajflow/config"
	_ "github.com/trajflow/trajflow/envs/builtin"
	"github.com/trajflow/trajflow/runner"
)

func main() {
	tasks := flag.Int("tasks", 125_000, "tasks (× n rollouts)")
	n := flag.Int("n", 8, "rollouts per task")
	every := flag.Duration("every", 2*time.Second, "sampling interval")
	commit := flag.Duration("commit-interval", 10*time.Second, "output.commit_interval")
	dir := flag.String("dir", "", "work directory (default: a temporary one, removed)")
	flag.Parse()
	if err := soak(*tasks, *n, *every, *commit, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

type sample struct {
	at         time.Duration
	goroutines int
	rssMiB     float64
	heapMiB    float64
}

func soak(tasks, n int, every, commit time.Duration, dir string) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "trajflow-soak-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(d) }() // best effort: a temporary directory, not output
		dir = d
	}
	taskFile := filepath.Join(dir, "tasks.jsonl")
	if err := writeTasks(taskFile, tasks); err != nil {
		return err
	}
	cfgText := fmt.Sprintf(`run: {id: soak, progress: 0}
source: {path: %q}
prompt: {user: "Solve: {question}"}
repeat: {n: %d, seed: 1}
generate: {endpoints: ["sim://"], model: sim, concurrency: 256, params: {max_tokens: 64}, sim: {seed: 1, time_scale: 0}}
env: {name: math, answer_field: expected_answer, concurrency: 64}
output: {dir: %q, commit_interval: %s}
`, taskFile, n, filepath.Join(dir, "out"), commit)
	cfg, err := config.Parse([]byte(cfgText), "soak.yaml", nil)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var samples []sample
	start := time.Now()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				s := sample{time.Since(start), runtime.NumGoroutine(), rssMiB(), float64(ms.HeapInuse) / (1 << 20)}
				samples = append(samples, s)
				fmt.Printf("%6s goroutines %4d  rss %7.1f MiB  heap %7.1f MiB\n", s.at.Round(time.Second), s.goroutines, s.rssMiB, s.heapMiB)
			}
		}
	}()
	sum, err := runner.Run(ctx, cfg, runner.Options{})
	close(done)
	if err != nil {
		return err
	}
	fmt.Print(sum)
	if len(samples) < 6 {
		return fmt.Errorf("only %d samples: run longer (-tasks) or sample more often (-every)", len(samples))
	}
	// The first sixth is warm-up; compare the rest's halves.
	rest := samples[len(samples)/6:]
	a, b := peak(rest[:len(rest)/2]), peak(rest[len(rest)/2:])
	fmt.Printf("%d rollouts in %s (%.0f/s); first half peak: %d goroutines, %.1f MiB RSS; second half: %d goroutines, %.1f MiB RSS\n",
		sum.Dispatched, sum.Duration.Round(time.Second), float64(sum.Dispatched)/sum.Duration.Seconds(), a.goroutines, a.rssMiB, b.goroutines, b.rssMiB)
	if b.goroutines > a.goroutines+8 || b.rssMiB > 1.25*a.rssMiB {
		return fmt.Errorf("not flat: goroutines %d → %d, RSS %.1f → %.1f MiB", a.goroutines, b.goroutines, a.rssMiB, b.rssMiB)
	}
	fmt.Println("flat: goroutines and RSS did not grow")
	return nil
}

func peak(ss []sample) sample {
	var p sample
	for _, s := range ss {
		p.goroutines = max(p.goroutines, s.goroutines)
		p.rssMiB = max(p.rssMiB, s.rssMiB)
		p.heapMiB = max(p.heapMiB, s.heapMiB)
	}
	return p
}

// rssMiB is this process's resident set (Linux; 0 elsewhere).
func rssMiB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }() // best effort: read only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

func writeTasks(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range n {
		a, b := 10+i%89, 10+(i*7)%89
		if err := enc.Encode(map[string]string{"question": fmt.Sprintf("What is %d + %d?", a, b), "expected_answer": strconv.Itoa(a + b)}); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}
