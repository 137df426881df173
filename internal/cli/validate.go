package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/runner"
)

const validateUsage = `Usage: trajflow validate CONFIG.yaml [--set section.key=value ...] [--rows N]

Checks everything a run would check and writes nothing (no output
directory, no lock, no key file): the config, the first N rows rendered
exactly as their first request would be sent (printed to stdout), every
endpoint (reachable, key accepted, model served; /tokenize and a token-id
prompt with generate.api: tokens), and the environment (started, reset on
the rendered rows, closed). Exit codes: 0 all is well, 2 a problem (each
one listed on stderr).

  --set section.key=value   override a config key (YAML value), repeatable
  --rows N                  rows to render and reset the environment on
                            (default 3; 0: none, the environment is only
                            started and closed)
`

func validateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var path string
	var sets []string
	rows := runner.DefaultValidateRows
	for i := 0; i < len(args); i++ {
		a := args[i]
		flagValue := func(name string) (string, bool) {
			if v, ok := strings.CutPrefix(a, name+"="); ok {
				return v, true
			}
			if i+1 >= len(args) {
				return "", false
			}
			i++
			return args[i], true
		}
		switch {
		case a == "-h" || a == "--help":
			fmt.Fprint(stdout, validateUsage)
			return ExitOK
		case a == "--set" || a == "-set" || strings.HasPrefix(a, "--set="):
			v, ok := flagValue("--set")
			if !ok {
				fmt.Fprintf(stderr, "trajflow validate: --set needs section.key=value\n\n%s", validateUsage)
				return ExitUsage
			}
			sets = append(sets, v)
		case a == "--rows" || strings.HasPrefix(a, "--rows="):
			v, ok := flagValue("--rows")
			n, err := strconv.Atoi(v)
			if !ok || err != nil || n < 0 {
				fmt.Fprintf(stderr, "trajflow validate: --rows needs a whole number >= 0\n\n%s", validateUsage)
				return ExitUsage
			}
			rows = n
		case strings.HasPrefix(a, "-"):
			fmt.Fprintf(stderr, "trajflow validate: unknown flag %s\n\n%s", a, validateUsage)
			return ExitUsage
		case path == "":
			path = a
		default:
			fmt.Fprintf(stderr, "trajflow validate: one config file, got %q and %q\n", path, a)
			return ExitUsage
		}
	}
	if path == "" {
		fmt.Fprint(stderr, validateUsage)
		return ExitUsage
	}
	cfg, err := config.Read(path, sets)
	if err != nil {
		fmt.Fprintln(stderr, "trajflow validate:", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitUsage
	}
	if rows == 0 {
		rows = -1 // runner.Validate: none
	}
	stderr = cfg.Redactor().Writer(stderr)
	if err := runner.Validate(ctx, cfg, runner.ValidateOptions{Rows: rows, Out: stdout}); err != nil {
		fmt.Fprintln(stderr, "trajflow validate:", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitUsage
	}
	return ExitOK
}
