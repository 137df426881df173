// Package cli is trajflow's command line: `trajflow run`, `sim-server` and
// the other subcommands, each a function from arguments to an exit code.
package cli
