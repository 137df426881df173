package serve_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/serve/client"
)

// TestServeEvalPinnedToVersion: with serve.eval every 2, a trainer that
// takes a step, acknowledges it, pauses, posts the next version and
// resumes gets evaluations at versions 2, 4 and 6: each one's rows all
// generated at that version (its requests carried it; the pause waited
// for it, so no weight update came in the middle), in its own folder,
// none of its rows in a training step; the status lists them.
func TestServeEvalPinnedToVersion(t *testing.T) {
	out := t.TempDir()
	evalTasks, err := filepath.Abs("../examples/quickstart/tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, testConfig(t, out, "serve.eval={source: {path: "+evalTasks+", limit: 60}, n: 4, every: 2}"), serve.Options{})
	c := client.New(s.url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	trained := map[string]bool{}
	for v := int64(1); v <= 6; v++ {
		step, err := c.Next(ctx, 2, client.FormatArrow)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range step.Records {
			ids := rec.Column(rec.Schema().FieldIndices(schema.ColumnName(schema.ColRunID))[0]).(*array.String)
			for i := range ids.Len() {
				trained[ids.Value(i)] = true
			}
		}
		step.Release()
		if err := c.Ack(ctx, step.Number); err != nil {
			t.Fatal(err)
		}
		if err := c.Pause(ctx, "keep"); err != nil {
			t.Fatal(err)
		}
		if done := v - 1; done > 0 && done%2 == 0 {
			// The pause waited for the evaluation of the version before.
			st, err := c.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Eval == nil || st.Eval.Running != nil || len(st.Eval.Results) == 0 || st.Eval.Results[len(st.Eval.Results)-1].Version != done {
				t.Fatalf("paused at version %d with the evaluation of %d not done: %+v", done, done, st.Eval)
			}
		}
		if err := c.SetPolicy(ctx, v); err != nil {
			t.Fatal(err)
		}
		if err := c.Resume(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The evaluation of version 6 ends on its own (no pause waits for it).
	var st *client.Status
	for {
		if st, err = c.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if st.Eval != nil && len(st.Eval.Results) == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("evaluations: %+v", st.Eval)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, r := range st.Eval.Results {
		want := int64(2 * (i + 1))
		if r.Version != want || r.Tasks != 60 || r.Rows != 240 || r.K != 4 || r.PassAtK < r.PassAt1 {
			t.Fatalf("evaluation %d: %+v, want version %d over 60 tasks × 4", i, r, want)
		}
		if trained[fmt.Sprintf("eval-v%d", want)] {
			t.Fatalf("a row of the evaluation at version %d was in a training step", want)
		}
		versions := evalVersions(t, filepath.Join(out, "eval", filepath.Base(r.Dir)))
		if len(versions) != 1 || !versions[want] {
			t.Fatalf("evaluation at version %d: rows generated at versions %v", want, versions)
		}
		if _, err := os.Stat(filepath.Join(r.Dir, serve.EvalFile)); err != nil {
			t.Fatal(err)
		}
	}
}

// evalVersions is the set of the min_policy_version and admitted_version
// values of an output directory's rows.
func evalVersions(t *testing.T, dir string) map[int64]bool {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, schema.DataDir, schema.PartGlob))
	if err != nil || len(paths) == 0 {
		t.Fatalf("%s: no parts (%v)", dir, err)
	}
	out := map[int64]bool{}
	for _, p := range paths {
		f, err := pqread.Open(p, memory.NewGoAllocator(), 1024)
		if err != nil {
			t.Fatal(err)
		}
		err = f.Records(context.Background(), nil, func(rec arrow.Record) error {
			for _, c := range []int{schema.ColMinPolicyVersion, schema.ColAdmittedVersion} {
				col := rec.Column(rec.Schema().FieldIndices(schema.ColumnName(c))[0]).(*array.Int64)
				for i := range col.Len() {
					out[col.Value(i)] = true
				}
			}
			return nil
		})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// An evaluation set that is not there stops the service at its start,
// naming the key, rather than at the first version due.
func TestServeEvalMissingSet(t *testing.T) {
	err := serve.Run(context.Background(), testConfig(t, t.TempDir(), "serve.eval={source: {path: nope.jsonl}, every: 2}"), serve.Options{
		Listening: func(net.Addr) { t.Error("listened") },
	})
	if err == nil || !strings.Contains(err.Error(), "serve.eval.source.path") {
		t.Fatalf("serve with a missing evaluation set: %v", err)
	}
}
