package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// embedMain is a program of another module: it runs a pipeline through the
// public API with its own Go environment and reads the Parquet back.
const embedMain = `package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/readback"
)

// vowels rewards the share of vowels in the answer.
type vowels struct{}

func (vowels) Reset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{}, nil
}

func (vowels) Step(ctx context.Context, r *pipeline.Rollout, a pipeline.Message) (*envs.Step, error) {
	n := 0
	for _, c := range strings.ToLower(a.Content) {
		if strings.ContainsRune("aeiou", c) {
			n++
		}
	}
	return &envs.Step{Reward: float64(n) / float64(len(a.Content)+1), Terminated: true,
		Metrics: map[string]float64{"vowels": float64(n)}}, nil
}

func main() {
	dir := os.Args[1]
	tasks := filepath.Join(dir, "tasks.jsonl")
	os.WriteFile(tasks, []byte("{\"q\": \"hello\"}\n{\"q\": \"world\"}\n{\"q\": \"again\"}\n"), 0o644)
	cfg, err := config.Parse([]byte("source: {path: "+tasks+"}\nprompt: {user: \"Say {q}\"}\nrepeat: {n: 2}\nenv: {name: vowels}\noutput: {dir: "+filepath.Join(dir, "out")+"}\nrun: {progress: 0}\n"), "embed.yaml", nil)
	if err != nil {
		fmt.Println("config:", err)
		os.Exit(2)
	}
	sum, err := runner.Run(context.Background(), cfg, runner.Options{Env: vowels{}})
	if err != nil {
		fmt.Println("run:", err)
		os.Exit(1)
	}
	rows, err := readback.Dir(filepath.Join(dir, "out", "data"))
	if err != nil {
		fmt.Println("read:", err)
		os.Exit(1)
	}
	withMetric := 0
	for _, r := range rows {
		if _, ok := r.Metrics["vowels"]; ok && r.Env == "vowels" && r.Reward > 0 {
			withMetric++
		}
	}
	fmt.Printf("ok=%d rows=%d scored=%d\n", sum.OK, len(rows), withMetric)
}
`

// A module outside this repository, using a replace directive, runs a
// pipeline with its own Go environment through the public API.
func TestEmbedFromAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds another module")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// The embedder requires what trajflow requires, plus trajflow itself.
	req := strings.Replace(string(goMod), "module github.com/trajflow/trajflow", "module example.com/embedder", 1)
	req += "\nrequire github.com/trajflow/trajflow v0.0.0\n\nreplace github.com/trajflow/trajflow => " + root + "\n"
	for name, body := range map[string]string{"go.mod": req, "go.sum": string(sum), "main.go": embedMain} {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gobin := filepath.Join(goroot(), "bin", "go")
	cmd := exec.Command(gobin, "run", ".", t.TempDir())
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "ok=6 rows=6 scored=6" {
		t.Fatalf("embedder printed %q, want ok=6 rows=6 scored=6", got)
	}
}
