package duckdb

import (
	"database/sql"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDuckDBStepQueries runs examples/grid with the trajflow binary and
// SCHEMA.md's step-table queries on its output: DuckDB reads the steps
// (nullable anchor columns included), joins every step to its trajectory,
// counts one step row per turn, and groups anchors.
func TestDuckDBStepQueries(t *testing.T) {
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	out := t.TempDir()
	cmd := exec.Command(binary, "run", "--quiet", "examples/grid/config.yaml", "--set", "output.dir="+out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("trajflow run: %v\n%s", err, b)
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := func(s string) string {
		s = strings.ReplaceAll(s, "'out/steps/*.parquet'", "'"+filepath.Join(out, "steps", "*.parquet")+"'")
		return strings.ReplaceAll(s, "'out/data/*.parquet'", "'"+filepath.Join(out, "data", "*.parquet")+"'")
	}
	// The row count contract.
	var steps, turns int64
	if err := db.QueryRow(q(`SELECT (SELECT count(*) FROM 'out/steps/*.parquet') AS steps,
       (SELECT sum(num_turns) FROM 'out/data/*.parquet') AS turns`)).Scan(&steps, &turns); err != nil {
		t.Fatal(err)
	}
	if steps == 0 || steps != turns {
		t.Fatalf("%d step rows, sum(num_turns) %d", steps, turns)
	}
	// The join: every step finds its trajectory, with its reward.
	var joined, mismatched int64
	if err := db.QueryRow(q(`SELECT count(*), count(*) FILTER (WHERE s.episode_reward <> t.reward OR s.episode_length <> t.num_turns)
FROM 'out/steps/*.parquet' s JOIN 'out/data/*.parquet' t USING (traj_id)`)).Scan(&joined, &mismatched); err != nil {
		t.Fatal(err)
	}
	if joined != steps || mismatched != 0 {
		t.Fatalf("join: %d of %d steps, %d mismatched", joined, steps, mismatched)
	}
	// Anchor groups: equal anchors within a group share one id.
	rows, err := db.Query(q(`SELECT group_id, anchor_group_id, any_value(anchor_obs) AS anchor,
       count(*) AS n, avg(step_return) AS mean_return, avg(1 - is_action_valid::INT) AS invalid_rate
FROM 'out/steps/*.parquet' WHERE anchor_group_id IS NOT NULL
GROUP BY ALL ORDER BY n DESC`))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	groups, shared := 0, 0
	for rows.Next() {
		var g, id, anchor string
		var n int64
		var mean, invalid float64
		if err := rows.Scan(&g, &id, &anchor, &n, &mean, &invalid); err != nil {
			t.Fatal(err)
		}
		groups++
		if n > 1 {
			shared++
		}
	}
	var ids, pairs int64
	if err := db.QueryRow(q(`SELECT count(DISTINCT anchor_group_id), count(DISTINCT (group_id, anchor_obs)) FROM 'out/steps/*.parquet'`)).Scan(&ids, &pairs); err != nil {
		t.Fatal(err)
	}
	if groups == 0 || shared == 0 || ids != pairs {
		t.Fatalf("%d anchor groups (%d shared); %d ids for %d (group, anchor) pairs", groups, shared, ids, pairs)
	}
}
