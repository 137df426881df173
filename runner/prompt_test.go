package runner_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/stages/generate"
)

// prompt.max_tokens end to end: with truncation left every row's prompt
// is the last max_tokens ids and prompt_tokens_dropped says how many went;
// with truncation error every row is an error row naming its input row.
func TestPromptMaxTokensRun(t *testing.T) {
	cfg := quickstart(t, "source.limit=3", "repeat.n=2", "generate.api=tokens", "prompt.max_tokens=24", "prompt.truncation=left")
	if err := runner.Check(cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rows := readBack(t, cfg.Output.Dir, schema.DataDir)
	if len(rows) != 6 || sum.OK != 6 {
		t.Fatalf("%d rows, summary %+v", len(rows), sum)
	}
	for _, r := range rows {
		if len(r.PromptTokenIDs) != 24 || r.PromptTokensDropped <= 0 || r.NumTurns != 1 {
			t.Errorf("%s: %d prompt ids, %d dropped, %d turns", r, len(r.PromptTokenIDs), r.PromptTokensDropped, r.NumTurns)
		}
	}

	cfg = quickstart(t, "source.limit=3", "repeat.n=2", "prompt.max_tokens=24", "run.max_error_rate=1")
	if err := runner.Check(cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	sum, err = run(t, cfg, runner.Options{})
	// Every row failed: the run generated nothing, and says so.
	if !errors.Is(err, runner.ErrNothingGenerated) {
		t.Fatalf("err %v", err)
	}
	rows = readBack(t, cfg.Output.Dir, schema.ErrorsDir)
	if len(rows) != 6 || sum.Errors != 6 || sum.ErrorClasses[generate.ClassPromptTooLong] != 6 {
		t.Fatalf("%d error rows, summary %+v", len(rows), sum)
	}
	for _, r := range rows {
		want := "tasks.jsonl:" // the input row's place
		if r.ErrorClass != generate.ClassPromptTooLong || !strings.Contains(r.Error, want) || !strings.Contains(r.Error, "more than 24 (prompt.truncation: error)") {
			t.Errorf("%s: %s: %s", r, r.ErrorClass, r.Error)
		}
	}
}
