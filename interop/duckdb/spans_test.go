package duckdb

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// sliceQuery is SCHEMA.md's query: each message's token ids sliced from
// the training view by its span, and an assistant message's logprobs from
// response_logprobs. DuckDB lists are 1-based and list_slice's end is
// inclusive, so the span [token_start, token_end) is
// list_slice(seq, token_start + 1, token_end).
const sliceQuery = `
SELECT task_index, rollout_index, i - 1 AS message, m.role,
       list_slice(prompt_token_ids || response_token_ids, m.token_start + 1, m.token_end) AS token_ids,
       CASE WHEN m.role = 'assistant' THEN list_slice(response_logprobs,
            m.token_start - len(prompt_token_ids) + 1, m.token_end - len(prompt_token_ids)) END AS logprobs
FROM (SELECT *, unnest(messages) AS m, generate_subscripts(messages, 1) AS i FROM SRC)`

// DuckDB slices every message's tokens out of the training view with the
// query SCHEMA.md gives, and its own counts of the training view agree
// with gen_tokens, env_tokens and total_tokens.
func TestDuckDBSlicesMessageTokens(t *testing.T) {
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := collate.New(memory.NewGoAllocator(), 16)
	defer c.Release()
	write := func(rec arrow.Record) {
		if rec == nil {
			return
		}
		defer rec.Release()
		if err := w.Write(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]pipeline.Message{}
	rollouts := map[string]*pipeline.Rollout{}
	for task := range int64(10) {
		g := pipelinetest.Group(task, 4, 400)
		for _, r := range g.Rollouts {
			rollouts[fmt.Sprint(task, "/", r.RolloutIndex)] = r
			for j, m := range r.Messages {
				want[fmt.Sprint(task, "/", r.RolloutIndex, "/", j)] = m
			}
		}
		write(c.Add(g))
	}
	write(c.Flush())
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src := fmt.Sprintf("read_parquet('%s')", filepath.Join(dir, "part-*.parquet"))

	rows, err := db.Query(strings.ReplaceAll(`SELECT task_index, rollout_index, message, role, token_ids::VARCHAR,
	        len(logprobs), coalesce(list_sum(logprobs), 0) FROM (`+sliceQuery+`)`, "SRC", src))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var task, ri, j int64
		var role, ids string
		var nlp sql.NullInt64
		var lpSum float64
		if err := rows.Scan(&task, &ri, &j, &role, &ids, &nlp, &lpSum); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprint(task, "/", ri, "/", j)
		m, ok := want[key]
		if !ok {
			t.Fatalf("DuckDB message %s not written", key)
		}
		seen++
		var wantIDs []string
		for _, id := range m.TokenIDs {
			wantIDs = append(wantIDs, fmt.Sprint(id))
		}
		if role != m.Role || ids != "["+strings.Join(wantIDs, ", ")+"]" || len(m.TokenIDs) == 0 {
			t.Errorf("message %s: DuckDB %s %s; want %s %v", key, role, ids, m.Role, m.TokenIDs)
		}
		var sum float64
		for _, lp := range m.Logprobs {
			sum += float64(lp)
		}
		if nlp.Int64 != int64(len(m.Logprobs)) || math.Abs(lpSum-sum) > 1e-4 {
			t.Errorf("message %s: DuckDB %d logprobs summing to %g; want %d, %g", key, nlp.Int64, lpSum, len(m.Logprobs), sum)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(want) {
		t.Errorf("DuckDB sliced %d messages, want %d", seen, len(want))
	}

	// The count columns are the training view's own: gen_tokens the
	// loss-mask-1 tokens, env_tokens the others, total_tokens both.
	var n, bad int64
	if err := db.QueryRow(strings.ReplaceAll(`SELECT count(*), count(*) FILTER (WHERE
	        gen_tokens != list_sum(loss_mask) OR total_tokens != len(response_token_ids)
	        OR env_tokens != total_tokens - gen_tokens OR len(loss_mask) != len(response_token_ids))
	    FROM SRC`, "SRC", src)).Scan(&n, &bad); err != nil {
		t.Fatal(err)
	}
	if n != int64(len(rollouts)) || bad != 0 {
		t.Errorf("%d rows, %d whose token counts disagree with the training view", n, bad)
	}
}
