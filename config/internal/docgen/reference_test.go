package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs/agent"
	"github.com/trajflow/trajflow/envs/grid"
	"github.com/trajflow/trajflow/envs/guess"
	"github.com/trajflow/trajflow/envs/gymagent"
	"github.com/trajflow/trajflow/envs/httpenv"
	mathenv "github.com/trajflow/trajflow/envs/math"
	"github.com/trajflow/trajflow/envs/subprocess"
	"github.com/trajflow/trajflow/sinks/parquet"
)

func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// docs/config.md is what the generator writes from the sources as they
// are: a changed Config field, tag, default or doc comment needs
// `go run ./config/internal/docgen`.
func TestReferenceUpToDate(t *testing.T) {
	r := root(t)
	want, err := Reference(r)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(r, ReferencePath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		hl, wl := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < max(len(hl), len(wl)); i++ {
			var h, w string
			if i < len(hl) {
				h = hl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if h != w {
				t.Fatalf("%s is stale (run go run ./config/internal/docgen); first difference at line %d:\nhave: %s\nwant: %s", ReferencePath, i+1, h, w)
			}
		}
	}
}

// configKeys lists every key of config.Config by its full dotted name,
// from the types alone (reflection over the yaml tags), independently of
// the generator's walk.
func configKeys(prefix string, t reflect.Type, out *[]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if opts == "inline" {
			if ft.Kind() == reflect.Struct {
				configKeys(prefix, ft, out)
			} else {
				*out = append(*out, prefix+"OPTION")
			}
			continue
		}
		*out = append(*out, prefix+name)
		if ft.Kind() == reflect.Struct && ft.PkgPath() != "" && ft.Name() != "Duration" {
			configKeys(prefix+name+".", ft, out)
		}
	}
}

// Every yaml key of every Config struct config.Config composes has its
// row in docs/config.md, and so does every option of every built-in
// environment.
func TestReferenceHasEveryKey(t *testing.T) {
	r := root(t)
	text, err := os.ReadFile(filepath.Join(r, ReferencePath))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(text)
	var keys []string
	configKeys("", reflect.TypeOf(config.Config{}), &keys)
	if len(keys) < 60 {
		t.Fatalf("found %d keys in config.Config: the walk is broken", len(keys))
	}
	for _, k := range keys {
		if !strings.Contains(k, ".") {
			if !strings.Contains(doc, "\n## "+k+"\n") {
				t.Errorf("section %s is missing from %s (run go run ./config/internal/docgen)", k, ReferencePath)
			}
			continue
		}
		if !strings.Contains(doc, "| `"+k+"` |") {
			t.Errorf("key %s is missing from %s (run go run ./config/internal/docgen)", k, ReferencePath)
		}
	}
	m, err := Build(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Envs) < 5 {
		t.Fatalf("found %d built-in environments under envs/", len(m.Envs))
	}
	for _, e := range m.Envs {
		_, after, ok := strings.Cut(doc, "\n### `name: "+e.Name+"`\n")
		if !ok {
			t.Errorf("environment %s is missing from %s", e.Name, ReferencePath)
			continue
		}
		section, _, _ := strings.Cut(after, "\n### ")
		for _, k := range e.Keys {
			if !strings.Contains(section, "| `"+k.Name+"` |") {
				t.Errorf("option %s of environment %s is missing from %s", k.Name, e.Name, ReferencePath)
			}
		}
	}
}

// Each key says what it is: a type, a default and a doc line that is not
// just its own name.
func TestReferenceRowsComplete(t *testing.T) {
	m, err := Build(root(t))
	if err != nil {
		t.Fatal(err)
	}
	check := func(k Key) {
		if k.Type == "" || k.Default == "" || len(strings.Fields(k.Doc)) < 4 {
			t.Errorf("%s: incomplete row: type %q, default %q, doc %q", k.Name, k.Type, k.Default, k.Doc)
		}
	}
	for _, s := range m.Sections {
		if s.Doc == "" {
			t.Errorf("section %s has no doc", s.Name)
		}
		for _, k := range s.Keys {
			check(k)
		}
	}
	for _, e := range m.Envs {
		for _, k := range e.Keys {
			check(k)
		}
	}
}

// The generator's pieces on their own.
func TestProse(t *testing.T) {
	sib := map[string]string{"MaxTokens": "max_tokens", "Seed": "seed", "API": "api"}
	for _, c := range []struct{ doc, goName, key, want string }{
		{"MaxTokens limits the prompt.", "MaxTokens", "max_tokens", "`max_tokens` limits the prompt."},
		{"Truncation keeps MaxTokens/2 ids.", "Truncation", "truncation", "`truncation` keeps `max_tokens`/2 ids."},
		{"See Shard.Resolve and MaxTokensX.", "X", "x", "See Shard.Resolve and MaxTokensX."},
		{"the API key, a `Seed` in code, or Seed.Set", "X", "x", "the API key, a `Seed` in code, or Seed.Set"},
		{"see docs/prompts.md and SCHEMA.md", "X", "x", "see [docs/prompts.md](prompts.md) and [SCHEMA.md](../SCHEMA.md)"},
	} {
		if got := prose(c.doc, c.goName, c.key, sib); got != c.want {
			t.Errorf("prose(%q) = %q, want %q", c.doc, got, c.want)
		}
	}
	for in, want := range map[string]string{"Default: `4`.": "`4`", "Some text.\n\nDefault: the output\ndirectory's name.": "the output directory's name"} {
		if _, got := splitDefault(in); got != want {
			t.Errorf("splitDefault(%q) = %q, want %q", in, got, want)
		}
	}
}

// A default a doc comment states in words ("Default: `4`.") is the one the
// code applies: each is checked against the constant the code uses.
func TestStatedDefaultsTrue(t *testing.T) {
	m, err := Build(root(t))
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]string{}
	for _, s := range m.Sections {
		for _, k := range s.Keys {
			defaults[k.Name] = k.Default
		}
	}
	for _, e := range m.Envs {
		for _, k := range e.Keys {
			defaults[e.Name+":"+k.Name] = k.Default
		}
	}
	for key, want := range map[string]any{
		"output.file_bytes":               parquet.DefaultFileBytes,
		"output.row_group_rows":           parquet.DefaultRowGroupRows,
		"math:env.answer_field":           mathenv.DefaultAnswerField,
		"tools:env.answer_field":          mathenv.DefaultAnswerField,
		"guess:env.max_guesses":           guess.DefaultMaxGuesses,
		"grid:env.size":                   grid.DefaultSize,
		"grid:env.walls":                  grid.DefaultWalls,
		"http:env.protocol":               httpenv.ProtocolResetStep,
		"http:env.request_timeout":        httpenv.DefaultRequestTimeout,
		"http:env.max_attempts":           httpenv.DefaultMaxAttempts,
		"http:env.backoff":                httpenv.DefaultBackoff,
		"subprocess:env.workers":          subprocess.DefaultWorkers,
		"subprocess:env.step_timeout":     subprocess.DefaultStepTimeout,
		"subprocess:env.shutdown_grace":   subprocess.DefaultGrace,
		"agent:env.stderr_tail":           agent.DefaultStderrTail,
		"agent:env.kill_grace":            agent.DefaultKillGrace,
		"agent:env.max_output":            agent.DefaultMaxOutput,
		"nemo_gym_agent:env.max_attempts": gymagent.DefaultMaxAttempts,
		"nemo_gym_agent:env.retry_delay":  gymagent.DefaultRetryDelay,
	} {
		var s string
		switch v := want.(type) {
		case time.Duration:
			s = shortDuration(v)
		default:
			s = fmt.Sprint(v)
		}
		got, ok := defaults[key]
		if !ok {
			t.Errorf("%s: no such key in the reference", key)
			continue
		}
		if !strings.HasPrefix(got, "`"+s+"`") {
			t.Errorf("%s: the doc comment states the default %s, the code applies %s", key, got, s)
		}
	}
}
