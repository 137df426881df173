package duckdb

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// Rows whose replies came without token ids have null training-view
// counts: DuckDB reads gen_tokens, env_tokens and total_tokens as NULL
// there (and an empty turn_gen_tokens), and the usage columns as written.
func TestDuckDBReadsUnknownCountsAsNull(t *testing.T) {
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := collate.New(memory.NewGoAllocator(), 64)
	defer c.Release()
	var unknownCompletion int64
	for task := range int64(4) {
		g := pipelinetest.Group(task, 2, 100)
		for _, r := range g.Rollouts {
			if task%2 == 1 {
				r.TokenIDsMissing = true
				unknownCompletion += int64(r.CompletionTokens)
			}
		}
		if rec := c.Add(g); rec != nil {
			t.Fatal("a record before the flush")
		}
	}
	rec := c.Flush()
	if err := w.Write(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src := fmt.Sprintf("read_parquet('%s')", filepath.Join(dir, "part-*.parquet"))
	var nulls, known, emptyTurns int64
	var completion sql.NullInt64
	if err := db.QueryRow(`SELECT
	        count(*) FILTER (WHERE gen_tokens IS NULL AND env_tokens IS NULL AND total_tokens IS NULL),
	        count(*) FILTER (WHERE gen_tokens IS NOT NULL AND env_tokens IS NOT NULL AND total_tokens IS NOT NULL),
	        count(*) FILTER (WHERE gen_tokens IS NULL AND len(turn_gen_tokens) = 0),
	        sum(completion_tokens) FILTER (WHERE gen_tokens IS NULL)
	    FROM `+src).Scan(&nulls, &known, &emptyTurns, &completion); err != nil {
		t.Fatal(err)
	}
	if nulls != 4 || known != 4 || emptyTurns != 4 || completion.Int64 != unknownCompletion {
		t.Errorf("%d rows with null counts, %d known, %d with empty turn_gen_tokens, %d completion tokens among the null ones; want 4, 4, 4, %d",
			nulls, known, emptyTurns, completion.Int64, unknownCompletion)
	}
}
