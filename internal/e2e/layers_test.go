package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The import rules of docs/architecture.md hold for every package of the
// module (tests excepted).
func TestLayers(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/trajflow/trajflow/"
	cmd := exec.Command(filepath.Join(goroot(), "bin", "go"), "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], mod)
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, mod) {
				imports[pkg] = append(imports[pkg], strings.TrimPrefix(imp, mod))
			}
		}
		if _, ok := imports[pkg]; !ok {
			imports[pkg] = nil
		}
	}
	under := func(pkg string, prefixes ...string) bool {
		for _, p := range prefixes {
			if pkg == p || strings.HasPrefix(pkg, p+"/") {
				return true
			}
		}
		return false
	}
	rules := []struct {
		name    string
		applies func(pkg string) bool
		allowed func(imp string) bool
	}{
		{"pipeline imports nothing of trajflow's", func(p string) bool { return p == "pipeline" }, func(string) bool { return false }},
		{"storage imports nothing of trajflow's", func(p string) bool { return under(p, "storage") }, func(string) bool { return false }},
		{"schema, inference and nemogym stand on pipeline alone", func(p string) bool { return p == "schema" || p == "inference" || p == "nemogym" },
			func(i string) bool { return i == "pipeline" }},
		{"components import no config, runner, command line or sibling implementation",
			func(p string) bool { return under(p, "sources", "stages", "envs", "sinks", "inference") },
			func(i string) bool { return !under(i, "config", "runner", "internal/command/cli", "cmd", "bench") }},
		{"sinks import no stage or source", func(p string) bool { return under(p, "sinks") },
			func(i string) bool { return !under(i, "stages", "sources", "envs") }},
		{"stages, sources and envs import no sink", func(p string) bool { return under(p, "stages", "sources", "envs") },
			func(i string) bool { return !under(i, "sinks") }},
		{"only the command chooses the built-in environments",
			func(p string) bool { return !under(p, "cmd", "bench", "envs/builtin") },
			func(i string) bool { return i != "envs/builtin" }},
		{"the library does not import the command line", func(p string) bool { return !under(p, "cmd", "internal/command/cli", "bench") },
			func(i string) bool { return !under(i, "internal/command/cli") }},
	}
	checked := 0
	for pkg, imps := range imports {
		for _, r := range rules {
			if !r.applies(pkg) {
				continue
			}
			checked++
			for _, imp := range imps {
				if !r.allowed(imp) {
					t.Errorf("%s imports %s: breaks %q", pkg, imp, r.name)
				}
			}
		}
	}
	if len(imports) < 30 || checked < 30 {
		t.Fatalf("checked %d packages (%d rule applications): go list found too little", len(imports), checked)
	}
}
