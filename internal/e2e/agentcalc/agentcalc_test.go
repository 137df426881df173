package agentcalc

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCalculateIsLibMjs: Calculate answers what lib.mjs's calculate
// answers (run by node), for numbers, errors and JavaScript's number
// formatting. Without node it skips, except under CI=true.
func TestCalculateIsLibMjs(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but node is not on PATH")
		}
		t.Skip("node is not on PATH")
	}
	exprs := []string{"2+3", "17 * 3", "86 + 83", "(1 + 2) * 3", "-4 + 1", "1 / 3", "10 / 4", "1 / 0", "-1 / 0", "0 / 0", "0 * -1",
		"2 *", "(1 + 2", "1 2", ".5 + .25", "1.5 * 2", "sim", "", "2 ** 3", ") 1", "1e3", "99999999 * 99999999"}
	lib, _ := filepath.Abs(filepath.Join("..", "..", "..", "examples", "agents", "lib.mjs"))
	in, _ := json.Marshal(exprs)
	script := `import { calculate } from ` + string(must(json.Marshal("file://"+lib))) + `;
console.log(JSON.stringify(` + string(in) + `.map(calculate)));`
	out, err := exec.Command(node, "--input-type=module", "-e", script).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var want []string
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &want); err != nil {
		t.Fatalf("node's output %q: %v", out, err)
	}
	for i, e := range exprs {
		if got := Calculate(e); got != want[i] {
			t.Errorf("Calculate(%q) = %q; lib.mjs says %q", e, got, want[i])
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
