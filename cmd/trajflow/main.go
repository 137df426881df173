// Command trajflow turns datasets of tasks into reinforcement-learning
// rollouts. See `trajflow help`.
package main

import (
	"os"

	"github.com/trajflow/trajflow/cmd/trajflow/cli"
	_ "github.com/trajflow/trajflow/envs/builtin" // the built-in environments
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
