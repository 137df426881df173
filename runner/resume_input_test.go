package runner_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/runner"
)

// copyTasks copies the quick start's first n tasks to a new file, with
// edit applied to their text.
func copyTasks(t *testing.T, name string, n int, edit func(string) string) string {
	t.Helper()
	root, _ := filepath.Abs("..")
	b, err := os.ReadFile(filepath.Join(root, "examples/quickstart/tasks.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")[:n]
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(edit(strings.Join(lines, ""))), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Resume knows its input: another file, or the same path holding other
// data, is refused naming source.path; the same file (even grown) resumes.
func TestResumeKnowsItsInput(t *testing.T) {
	same := func(s string) string { return s }
	a := copyTasks(t, "a.jsonl", 40, same)
	b := copyTasks(t, "b.jsonl", 40, func(s string) string { return strings.Replace(s, "1", "7", 3) })
	out := t.TempDir()
	sets := []string{"source.limit=20", "output.batch_rows=8", "output.file_rows=8", "output.dir=" + out}
	if _, err := run(t, quickstart(t, append(sets, "source.path="+a)...), runner.Options{}); err != nil {
		t.Fatal(err)
	}

	_, err := run(t, quickstart(t, append(sets, "source.path="+b)...), runner.Options{})
	if !errors.Is(err, runner.ErrConfigChanged) || !strings.Contains(err.Error(), "source.path: \""+a+"\" → \""+b+"\"") {
		t.Fatalf("another file: %v", err)
	}

	orig, _ := os.ReadFile(a)
	os.WriteFile(a, []byte(strings.Replace(string(orig), "1", "7", 3)), 0o644)
	_, err = run(t, quickstart(t, append(sets, "source.path="+a)...), runner.Options{})
	if !errors.Is(err, runner.ErrConfigChanged) || !strings.Contains(err.Error(), "source.path: "+a+" is not the input the committed work was made from") {
		t.Fatalf("same path, other data: %v", err)
	}
	if _, err := run(t, quickstart(t, append(sets, "source.path="+a)...), runner.Options{AllowConfigChange: true}); err != nil {
		t.Fatalf("--allow-config-change: %v", err)
	}

	// The original input with rows appended resumes.
	orig = append(orig, []byte(`{"question": "1+1", "expected_answer": "2"}`+"\n")...)
	os.WriteFile(a, orig, 0o644)
	out2 := t.TempDir()
	sets2 := []string{"source.limit=20", "output.batch_rows=8", "output.file_rows=8", "output.dir=" + out2, "source.path=" + a}
	if _, err := run(t, quickstart(t, sets2...), runner.Options{}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(a, append(orig, []byte(`{"question": "2+2", "expected_answer": "4"}`+"\n")...), 0o644)
	_, err = run(t, quickstart(t, append(sets2, "source.limit=30")...), runner.Options{})
	if err == nil || !strings.Contains(err.Error(), "source.limit") {
		// source.limit is semantic: the refusal names it, not the input.
		t.Fatalf("limit change: %v", err)
	}
	if sum, err := run(t, quickstart(t, sets2...), runner.Options{}); err != nil || sum.Resumed == 0 {
		t.Fatalf("same input resumed: %+v, %v", sum, err)
	}
}

// An environment's pool sizes, timeouts and retries are not semantic: a
// resume may change them.
func TestResumeWithOtherEnvTimeouts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/reset") {
			w.Write([]byte(`{}`))
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"reward": 1, "terminated": true})
	}))
	defer srv.Close()
	out := t.TempDir()
	sets := []string{"source.limit=12", "output.batch_rows=8", "output.file_rows=8", "output.dir=" + out}
	env := "env={name: http, url: " + srv.URL + ", request_timeout: 10s, max_attempts: 2}"
	if _, err := run(t, quickstart(t, append(sets, env)...), runner.Options{}); err != nil {
		t.Fatal(err)
	}
	env = "env={name: http, url: " + srv.URL + ", request_timeout: 20s, max_attempts: 4, backoff: 1s}"
	sum, err := run(t, quickstart(t, append(sets, env)...), runner.Options{})
	if err != nil || sum.Resumed == 0 {
		t.Fatalf("resume with other timeouts: %+v, %v", sum, err)
	}
}
