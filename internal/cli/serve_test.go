package cli_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/internal/cli"
)

// Bad serve command lines and configs exit 2 naming the flag or key, and
// create nothing.
func TestServeBadInput(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	out := filepath.Join(t.TempDir(), "out")
	base := []string{"serve", "examples/serve/serve.yaml", "--set", "output.dir=" + out}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no config", []string{"serve"}, "Usage: trajflow serve"},
		{"--addr without a value", append(base, "--addr"), "--addr needs HOST:PORT"},
		{"unknown flag", append(base, "--port", "1"), "unknown flag --port"},
		{"open address, no token", append(base, "--addr", "0.0.0.0:0"), "serve.token_env: required"},
		{"token variable unset", append(base, "--addr", "0.0.0.0:0", "--set", "serve.token_env=TRAJFLOW_TEST_UNSET_TOKEN"), "TRAJFLOW_TEST_UNSET_TOKEN is unset or empty"},
		{"bad addr", append(base, "--addr", "nowhere"), "serve.addr"},
		{"negative lease", append(base, "--set", "serve.lease=-1s"), "serve.lease"},
		{"bad pause mode", append(base, "--set", "serve.pause_mode=later"), "serve.pause_mode"},
		{"a target", append(base, "--set", "groups.target=8"), "groups.target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Main(tc.args, &stdout, &stderr)
			if code != cli.ExitUsage || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Fatalf("the refused serve created %s", out)
			}
		})
	}
}
