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

const validateUsage = `Usage: trajflow validate CONFIG.yaml [--set section.key=value ...] [--rows N] [--send]

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
  --send                    also send each rendered row's first request, as
                            the run's first turn would (one generation per
                            row); a request the server refuses is a problem
`

func validateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	rows := runner.DefaultValidateRows
	send := false
	path, sets, code := configArgs("validate", validateUsage, args, stdout, stderr, func(a string, next func() (string, bool)) (bool, int) {
		if a == "--send" {
			send = true
			return true, -1
		}
		if name, _, _ := strings.Cut(a, "="); name != "--rows" {
			return false, -1
		}
		v, ok := next()
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 {
			fmt.Fprintf(stderr, "trajflow validate: --rows needs a whole number >= 0\n\n%s", validateUsage)
			return true, ExitUsage
		}
		rows = n
		return true, -1
	})
	if code >= 0 {
		return code
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
	if err := runner.Validate(ctx, cfg, runner.ValidateOptions{Rows: rows, Send: send, Out: stdout}); err != nil {
		fmt.Fprintln(stderr, "trajflow validate:", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitUsage
	}
	return ExitOK
}
