package client_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"

	"github.com/trajflow/trajflow/config"
	_ "github.com/trajflow/trajflow/envs/builtin"
	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/serve/client"
)

// A trainer's loop: take a step of K groups as Arrow records, train, bring
// the fleet to the new weights (pause, version, resume), acknowledge.
func Example() {
	url, stop := startService() // trajflow serve on the simulator
	defer stop()

	ctx := context.Background()
	c := client.New(url, "") // a token on a non-loopback address
	c.Name = "rank-0"        // recorded with a pause
	// The first call: where the fleet is (a trainer restarted from a
	// checkpoint goes on from its policy version).
	start, err := c.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for version := start.PolicyVersion + 1; version <= start.PolicyVersion+2; version++ {
		step, err := c.Next(ctx, 4, client.FormatArrow)
		if err != nil {
			log.Fatal(err)
		}
		var rows int64
		for _, rec := range step.Records {
			rows += rec.NumRows() // ... train on the columns ...
		}
		step.Release()
		if err := c.Pause(ctx, "abort"); err != nil {
			log.Fatal(err)
		}
		// ... load the new weights on the inference servers ...
		if err := c.SetPolicy(ctx, version); err != nil {
			log.Fatal(err)
		}
		if err := c.Resume(ctx); err != nil {
			log.Fatal(err)
		}
		if err := c.Ack(ctx, step.Number); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("step %d: %d groups, %d rows, versions %v\n", step.Number, step.Groups, rows, step.Versions)
	}
	st, err := c.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("policy v%d, %d steps acknowledged\n", st.PolicyVersion, st.Steps.Acked)
	// Output:
	// step 1: 4 groups, 16 rows, versions [0]
	// step 2: 4 groups, 16 rows, versions [0]
	// policy v2, 2 steps acknowledged
}

// startService runs trajflow serve in the process, on the built-in
// simulator, in a temporary output directory.
func startService() (url string, stop func()) {
	tasks, _ := filepath.Abs("../../examples/quickstart/tasks.jsonl")
	tmp, err := os.MkdirTemp("", "trajflow-serve-example-")
	if err != nil {
		log.Fatal(err)
	}
	out := filepath.Join(tmp, "out")
	yml := fmt.Sprintf(`
source: {path: %q}
prompt: {user: "Solve: {question}"}
repeat: {n: 4, seed: 1}
generate: {endpoints: ["sim://"], model: sim-math, concurrency: 16, sim: {seed: 7, accuracy: 0.5}}
env: {name: math, answer_field: expected_answer}
groups: {keep: nonzero_std}
output: {dir: %q}
serve: {addr: "127.0.0.1:0", commit_interval: 50ms}
`, tasks, out)
	cfg, err := config.Parse([]byte(yml), "example.yaml", nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- serve.Run(ctx, cfg, serve.Options{Listening: func(a net.Addr) { addr <- a }}) }()
	select {
	case a := <-addr:
		url = "http://" + a.String()
	case err := <-done:
		log.Fatal(err)
	}
	return url, func() {
		cancel()
		<-done
		os.RemoveAll(tmp)
	}
}
