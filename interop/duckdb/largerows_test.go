package duckdb

import (
	"context"
	"crypto/md5"
	"database/sql"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// Rows of several MiB written by the sink read in DuckDB with every long
// value whole (Arrow's reader is checked in sinks/parquet).
func TestDuckDBReadsLargeRows(t *testing.T) {
	for _, compression := range []string{"zstd", "none"} {
		t.Run(compression, func(t *testing.T) {
			dir := t.TempDir()
			w, err := pqsink.New(dir, pqsink.Options{Compression: compression})
			if err != nil {
				t.Fatal(err)
			}
			c := collate.New(memory.NewGoAllocator(), 2)
			defer c.Release()
			grp := pipelinetest.Group(3, 2, 6<<20)
			write := func(rec arrow.Record) {
				if rec == nil {
					return
				}
				defer rec.Release()
				if err := w.Write(context.Background(), rec); err != nil {
					t.Fatal(err)
				}
			}
			write(c.Add(grp))
			write(c.Flush())
			if err := w.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			db, err := sql.Open("duckdb", "")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			q := fmt.Sprintf(`SELECT traj_id, length(messages[3].content), md5(messages[3].content),
			        len(response_token_ids), list_sum(response_token_ids), messages[5].token_end - messages[5].token_start
			    FROM read_parquet('%s') ORDER BY rollout_index`, filepath.Join(dir, "part-00000.parquet"))
			rows, err := db.Query(q)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			i := 0
			for rows.Next() {
				var traj, sum string
				var n, ntok, nlp int64
				var idsum int64
				if err := rows.Scan(&traj, &n, &sum, &ntok, &idsum, &nlp); err != nil {
					t.Fatal(err)
				}
				r := grp.Rollouts[i]
				h := md5.Sum([]byte(r.Messages[2].Content))
				var wantSum int64
				for _, id := range r.ResponseTokenIDs {
					wantSum += int64(id)
				}
				if traj != r.TrajID || n != int64(len(r.Messages[2].Content)) || sum != hex.EncodeToString(h[:]) ||
					ntok != int64(len(r.ResponseTokenIDs)) || idsum != wantSum || nlp != int64(len(r.Messages[4].Logprobs)) {
					t.Errorf("row %d: DuckDB %s %d %s %d %d %d; want %s %d %x %d %d %d", i, traj, n, sum, ntok, idsum, nlp,
						r.TrajID, len(r.Messages[2].Content), h, len(r.ResponseTokenIDs), wantSum, len(r.Messages[4].Logprobs))
				}
				if n < 1<<20 {
					t.Errorf("row %d: message of %d bytes, want a long one", i, n)
				}
				i++
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if i != len(grp.Rollouts) {
				t.Errorf("DuckDB read %d rows, want %d", i, len(grp.Rollouts))
			}
		})
	}
}
