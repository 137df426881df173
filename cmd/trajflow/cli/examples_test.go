package cli_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/cmd/trajflow/cli"
)

// The migration examples (docs/migrating.md) run offline, from the
// repository root, as a user would run them.
func TestMigrationExamples(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	for _, tc := range []struct {
		config string
		rows   int64
		envs   []string
	}{
		{config: "examples/nemo-rl/config.yaml", rows: 160, envs: []string{"math"}},
		{config: "examples/nemo-gym/config.yaml", rows: 28, envs: []string{"math", "quiz"}},
		{config: "examples/grid/config.yaml", rows: 32, envs: []string{"grid"}},
	} {
		t.Run(filepath.Base(filepath.Dir(tc.config)), func(t *testing.T) {
			t.Chdir(root)
			out := t.TempDir()
			var stdout, stderr bytes.Buffer
			code := cli.Main([]string{"run", "--quiet", tc.config, "--set", "output.dir=" + out}, &stdout, &stderr)
			if code != cli.ExitOK {
				t.Fatalf("exit %d\n%s", code, stderr.String())
			}
			b, err := os.ReadFile(filepath.Join(out, "metrics.json"))
			if err != nil {
				t.Fatal(err)
			}
			var m struct {
				Rows                   int64                      `json:"rows"`
				NaturalTerminationRate *float64                   `json:"natural_termination_rate"`
				Envs                   map[string]json.RawMessage `json:"envs"`
			}
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if m.Rows != tc.rows || m.NaturalTerminationRate == nil || len(m.Envs) != len(tc.envs) {
				t.Fatalf("metrics.json: %s", b)
			}
			for _, e := range tc.envs {
				if m.Envs[e] == nil {
					t.Errorf("metrics.json has no env %s", e)
				}
			}
		})
	}
}
