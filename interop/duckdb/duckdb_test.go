package duckdb

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2" // database/sql driver "duckdb"

	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

const (
	numTasks = 120
	groupN   = 4
)

// binary is the trajflow binary TestMain built from the repository root.
var binary string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "trajflow-duckdb-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binary = filepath.Join(dir, "trajflow")
	build := exec.Command("go", "build", "-o", binary, "./cmd/trajflow")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/trajflow in %s: %v\n%s", root, err, out)
		return 1
	}
	return m.Run()
}

// quickstart runs a quick-start-like simulated run into a temporary
// directory and returns its data directory.
func quickstart(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 0))
	var tasks bytes.Buffer
	enc := json.NewEncoder(&tasks)
	for i := range numTasks {
		a, b := rng.IntN(90)+10, rng.IntN(90)+10
		if err := enc.Encode(map[string]string{
			"id": fmt.Sprintf("q-%04d", i), "question": fmt.Sprintf("What is %d + %d?", a, b),
			"expected_answer": fmt.Sprint(a + b),
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Task 0 holds invalid UTF-8 (a Latin-1 byte, a lone continuation
	// byte): trajflow replaces it and the files stay readable by DuckDB,
	// which refuses a file with one invalid string.
	raw := bytes.Replace(tasks.Bytes(), []byte("What is"), []byte("What\xe9 is\x80"), 1)
	taskPath := filepath.Join(dir, "tasks.jsonl")
	if err := os.WriteFile(taskPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	cfg := fmt.Sprintf(`run: {id: duckdb, progress: 0}
source: {path: %q}
prompt: {system: "You are a careful mathematician. Put the final answer in \\boxed{{}}.", user: "Solve: {question}"}
repeat: {n: %d, seed: 1234}
generate:
  endpoints: ["sim://"]
  model: sim-math
  concurrency: 64
  params: {temperature: 1.0, max_tokens: 256}
  sim: {seed: 7, accuracy: 0.6}
env: {name: math, answer_field: expected_answer}
groups: {keep: all}
output: {dir: %q, file_rows: 100, batch_rows: 40}
`, taskPath, groupN, out)
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "run", cfgPath)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("trajflow run: %v\n%s", err, b)
	}
	return filepath.Join(out, "data")
}

// readArrow reads every part file of dir with Arrow's own Parquet reader
// (a checked allocator that must end at zero) and decodes the rows.
func readArrow(t *testing.T, dir string) []*pipeline.Rollout {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "part-*.parquet"))
	if err != nil || len(paths) < 2 {
		t.Fatalf("part files in %s: %v (%v), want several", dir, paths, err)
	}
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	var all []*pipeline.Rollout
	for _, p := range paths {
		func() {
			f, err := file.OpenParquetFile(p, false, file.WithReadProps(parquet.NewReaderProperties(alloc)))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fr, err := pqarrow.NewFileReader(f, pqarrow.ArrowReadProperties{BatchSize: 1 << 16}, alloc)
			if err != nil {
				t.Fatal(err)
			}
			tbl, err := fr.ReadTable(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer tbl.Release()
			tr := array.NewTableReader(tbl, 1<<20)
			defer tr.Release()
			for tr.Next() {
				rs, err := schema.Rollouts(tr.Record())
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, rs...)
			}
		}()
	}
	return all
}

func TestDuckDBReadsOutput(t *testing.T) {
	data := quickstart(t)
	want := readArrow(t, data)
	if len(want) != numTasks*groupN {
		t.Fatalf("Arrow read %d rows, want %d", len(want), numTasks*groupN)
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Single quotes in a path would end the SQL string: the temp dir has none.
	src := fmt.Sprintf("read_parquet('%s')", filepath.Join(data, "part-*.parquet"))
	query := func(q string, dest ...any) {
		t.Helper()
		q = strings.ReplaceAll(q, "SRC", src)
		if err := db.QueryRow(q).Scan(dest...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	t.Run("counts", func(t *testing.T) {
		var rows, keys, groups int64
		query(`SELECT count(*), count(DISTINCT (task_index, attempt, rollout_index)),
		              count(DISTINCT group_id) FROM SRC`, &rows, &keys, &groups)
		if rows != numTasks*groupN || keys != rows || groups != numTasks {
			t.Errorf("rows %d, distinct keys %d, groups %d; want %d, %d, %d",
				rows, keys, groups, numTasks*groupN, numTasks*groupN, numTasks)
		}
	})

	t.Run("invalid UTF-8 in the input", func(t *testing.T) {
		var n int64
		var task, content string
		query(`SELECT count(*), any_value(task), any_value(messages[-2].content) FROM SRC WHERE task_index = 0`, &n, &task, &content)
		if n != groupN || !strings.Contains(task, "What\uFFFD is\uFFFD") || !strings.Contains(content, "What\uFFFD is\uFFFD") {
			t.Errorf("task 0: %d rows, task %q, prompt %q", n, task, content)
		}
	})

	t.Run("mean reward", func(t *testing.T) {
		var sum float64
		for _, r := range want {
			sum += r.Reward
		}
		mean := sum / float64(len(want))
		var got float64
		query(`SELECT avg(reward) FROM SRC`, &got)
		t.Logf("avg(reward) = %v over %d rows", got, len(want))
		if math.Abs(got-mean) > 1e-12 || mean == 0 || mean == 1 {
			t.Errorf("DuckDB avg(reward) = %v, Arrow mean = %v (want equal, strictly between 0 and 1)", got, mean)
		}
		// Group columns agree with the rows DuckDB groups itself.
		var bad int64
		query(`SELECT count(*) FROM (
		         SELECT group_id, avg(reward) AS m, any_value(group_reward_mean) AS gm
		         FROM SRC GROUP BY group_id) WHERE abs(m - gm) > 1e-9`, &bad)
		if bad != 0 {
			t.Errorf("%d groups whose group_reward_mean differs from DuckDB's avg(reward)", bad)
		}
	})

	t.Run("messages", func(t *testing.T) {
		// Messages hold spans in the training view (schema v2); their
		// lengths agree between the readers. (Until the generate stage
		// records spans, a live run's are empty: 0 tokens on both sides;
		// TestDuckDBSlicesMessageTokens checks slicing with real spans.)
		roles := map[string]int64{}
		var tokens int64
		for _, r := range want {
			for _, m := range r.Messages {
				roles[m.Role]++
				tokens += int64(m.TokenEnd - m.TokenStart)
			}
		}
		rows, err := db.Query(strings.ReplaceAll(`SELECT m.role, count(*), sum(m.token_end - m.token_start)
		    FROM (SELECT unnest(messages) AS m FROM SRC) GROUP BY m.role ORDER BY m.role`, "SRC", src))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[string]int64{}
		var gotTokens int64
		for rows.Next() {
			var role string
			var n, tok int64
			if err := rows.Scan(&role, &n, &tok); err != nil {
				t.Fatal(err)
			}
			got[role], gotTokens = n, gotTokens+tok
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		t.Logf("messages by role %v, %d token ids", got, gotTokens)
		if fmt.Sprint(got) != fmt.Sprint(roles) || gotTokens != tokens || roles["assistant"] == 0 {
			t.Errorf("DuckDB messages by role %v (%d tokens), Arrow %v (%d tokens)", got, gotTokens, roles, tokens)
		}
		// One row's last message, through struct field access.
		r := want[len(want)/2]
		last := r.Messages[len(r.Messages)-1]
		var role, content string
		var turn int32
		query(fmt.Sprintf(`SELECT messages[-1].role, messages[-1].content, messages[-1].turn FROM SRC
		    WHERE task_index = %d AND attempt = %d AND rollout_index = %d`, r.Task.Index, r.Attempt, r.RolloutIndex),
			&role, &content, &turn)
		if role != last.Role || content != last.Content || int(turn) != last.Turn || content == "" {
			t.Errorf("DuckDB last message (%s, turn %d) %q; Arrow (%s, turn %d) %q",
				role, turn, content, last.Role, last.Turn, last.Content)
		}
	})

	t.Run("metrics as a map", func(t *testing.T) {
		var acc float64
		var withAcc int64
		for _, r := range want {
			if v, ok := r.Metrics["acc"]; ok {
				acc += v
				withAcc++
			}
		}
		var got float64
		var n int64
		query(`SELECT sum(map_from_entries(metrics)['acc']), count(map_from_entries(metrics)['acc']) FROM SRC`, &got, &n)
		t.Logf("sum(acc) = %v over %d rows", got, n)
		if withAcc == 0 || n != withAcc || math.Abs(got-acc) > 1e-9 {
			t.Errorf("DuckDB sum(acc) %v over %d rows; Arrow %v over %d rows", got, n, acc, withAcc)
		}
	})

	t.Run("light columns only", func(t *testing.T) {
		type kr struct {
			task   int64
			reward float64
		}
		var wantKR []kr
		for _, r := range want {
			if r.RolloutIndex == 0 {
				wantKR = append(wantKR, kr{r.Task.Index, r.Reward})
			}
		}
		sort.Slice(wantKR, func(i, j int) bool { return wantKR[i].task < wantKR[j].task })
		rows, err := db.Query(strings.ReplaceAll(`SELECT task_index, reward FROM SRC
		    WHERE rollout_index = 0 ORDER BY task_index`, "SRC", src))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []kr
		for rows.Next() {
			var v kr
			if err := rows.Scan(&v.task, &v.reward); err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(wantKR) {
			t.Errorf("DuckDB (task_index, reward) of rollout 0:\n%v\nArrow:\n%v", got, wantKR)
		}
		// The plan reads the three columns named and no heavy one.
		var plan strings.Builder
		prow, err := db.Query(strings.ReplaceAll(`EXPLAIN SELECT task_index, reward FROM SRC WHERE rollout_index = 0`, "SRC", src))
		if err != nil {
			t.Fatal(err)
		}
		defer prow.Close()
		for prow.Next() {
			var k, v string
			if err := prow.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(v)
		}
		t.Logf("plan:\n%s", plan.String())
		if got := projections(plan.String()); fmt.Sprint(got) != "[task_index reward]" {
			t.Errorf("the Parquet scan of a light query projects %v, want [task_index reward]", got)
		}
	})

	t.Run("key-value metadata", func(t *testing.T) {
		var files, versions int64
		query(fmt.Sprintf(`SELECT count(DISTINCT file_name), count(*) FILTER (WHERE decode(key) = '%s' AND decode(value) = '%s')
		    FROM parquet_kv_metadata('%s')`, schema.MetadataKey, schema.Version, filepath.Join(data, "part-*.parquet")),
			&files, &versions)
		if files < 2 || versions != files {
			t.Errorf("%d files, %d with %s = %s", files, versions, schema.MetadataKey, schema.Version)
		}
	})
}

// projections returns the column names listed under "Projections:" in a
// DuckDB EXPLAIN box diagram.
func projections(plan string) []string {
	var cols []string
	in := false
	for _, line := range strings.Split(plan, "\n") {
		cell := strings.TrimSpace(strings.Trim(strings.TrimSpace(line), "│"))
		switch {
		case cell == "Projections:":
			in = true
		case in && cell == "":
			return cols
		case in:
			cols = append(cols, cell)
		}
	}
	return cols
}
