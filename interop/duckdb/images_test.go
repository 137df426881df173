package duckdb

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

// imageQuery is SCHEMA.md's query: the bytes of every image of the kept
// rows, joined from messages.parts to the files under images/.
const imageQuery = `
WITH parts AS (
  SELECT traj_id, m.turn, p.image_url
  FROM 'OUT/data/*.parquet', UNNEST(messages) AS u(m), UNNEST(m.parts) AS v(p)
  WHERE p.type = 'image_url'
)
SELECT parts.traj_id, parts.turn, b.filename, b.content
FROM parts JOIN read_blob('OUT/images/*') AS b
  ON regexp_extract(b.filename, '([0-9a-f]{64})\.[^./]+$', 1) = replace(parts.image_url, 'sha256:', '');`

// DuckDB finds every image of examples/vlm's output from its reference
// with the query SCHEMA.md gives, and the bytes are the rows' own.
func TestDuckDBResolvesImages(t *testing.T) {
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(binary, "run", filepath.Join(root, "examples/vlm/config.yaml"),
		"--set", "source.path="+filepath.Join(root, "examples/vlm/tasks.jsonl"), "--set", "output.dir="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("trajflow run: %v\n%s", err, b)
	}
	// Each task's image bytes, from the input rows.
	f, err := os.Open(filepath.Join(root, "examples/vlm/tasks.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var row struct {
			Messages []struct {
				Content []struct {
					ImageURL struct{ URL string } `json:"image_url"`
				} `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		_, data, err := pipeline.ParseDataURL(row.Messages[0].Content[1].ImageURL.URL)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, data)
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(strings.ReplaceAll(imageQuery, "OUT", out))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var traj, file string
		var turn int
		var content []byte
		if err := rows.Scan(&traj, &turn, &file, &content); err != nil {
			t.Fatal(err)
		}
		var task, attempt, rollout int
		if _, err := fmt.Sscanf(traj, "t%d-a%d-r%d", &task, &attempt, &rollout); err != nil || task >= len(want) {
			t.Fatalf("traj_id %q", traj)
		}
		if turn != 0 || !bytes.Equal(content, want[task]) || !strings.HasSuffix(file, ".png") {
			t.Errorf("%s: turn %d, %s holds %d bytes, want the row's %d", traj, turn, file, len(content), len(want[task]))
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(want)*4 {
		t.Errorf("%d images joined, want %d", n, len(want)*4)
	}
}
