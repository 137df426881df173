package validate_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/trajflow/trajflow/config"
	_ "github.com/trajflow/trajflow/envs/builtin"
	"github.com/trajflow/trajflow/runner/validate"
)

// Validate renders the first row as the run would send it, through the
// build steps a run walks, and writes nothing.
func ExampleRun() {
	dir, _ := os.MkdirTemp("", "example-validate-")
	defer os.RemoveAll(dir)
	cfg, err := config.Decode([]byte(`
prompt: {user: "Solve: {question}"}
repeat: {n: 2, seed: 3}
generate: {endpoints: ["sim://"], model: sim, params: {max_tokens: 64}}
env: {name: math, answer_field: expected_answer}
`), "run.yaml", []string{"source.path=testdata/tasks.jsonl", "output.dir=" + filepath.Join(dir, "out")})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = validate.Run(context.Background(), cfg, validate.Options{Rows: 1, Out: os.Stdout})
	fmt.Println(err)
	if _, serr := os.Stat(filepath.Join(dir, "out")); os.IsNotExist(serr) {
		fmt.Println("nothing written")
	}
	// Output:
	// config: ok
	// endpoints: sim:// (the built-in simulator)
	// env math: started
	// row 0 (testdata/tasks.jsonl:1), rollout 0 of 2, seed 3:
	//   user: Solve: 1+1
	//   model sim, params {"max_tokens":64,"seed":3}
	// env math: reset on 1 row(s)
	// ok: a run would start
	// <nil>
	// nothing written
}
