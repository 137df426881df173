package serveexample

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestPythonClient runs client.py's unit tests (test_client.py: its
// retries against a scripted server) with python3; skipped, saying so,
// where python3 is not installed (CI installs it).
func TestPythonClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not installed; .ci/run installs it")
		}
		t.Skip("python3 is not installed: client.py's unit tests (test_client.py) did not run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "-v", "test_client")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest test_client (in examples/serve): %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
