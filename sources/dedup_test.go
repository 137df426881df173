package sources

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	pq "github.com/parquet-go/parquet-go"
)

// dupRows: rows 0, 2 and 5 are one task (2 differs only in key order and
// spacing), 1 and 4 another; 3 and 6 are their own.
var dupRows = strings.Join([]string{
	`{"q":"a","n":1}`,
	`{"q":"b"}`,
	`{ "n": 1, "q": "a" }`,
	`{"q":"c"}`,
	`{"q":"b"}`,
	`{"q":"a","n":1}`,
	`{"q":"d"}`,
}, "\n") + "\n"

func TestTaskIndexDedup(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		skip      func(int64) bool
		want      []int64  // task indexes read
		wantWhere []string // their lines
	}{
		{"line (default)", Config{}, nil, []int64{0, 1, 2, 3, 4, 5, 6}, nil},
		{"dedup", Config{TaskIndex: TaskIndexDedup}, nil, []int64{0, 1, 2, 3},
			[]string{"tasks.jsonl:1", "tasks.jsonl:2", "tasks.jsonl:4", "tasks.jsonl:7"}},
		// NeMo Gym's numbering compares the raw lines: row 2 (key order,
		// spacing) is a task of its own.
		{"dedup_lines", Config{TaskIndex: TaskIndexDedupLines}, nil, []int64{0, 1, 2, 3, 4},
			[]string{"tasks.jsonl:1", "tasks.jsonl:2", "tasks.jsonl:3", "tasks.jsonl:4", "tasks.jsonl:7"}},
		// Rows before the offset still number the tasks and make later copies repeats.
		{"dedup with offset", Config{TaskIndex: TaskIndexDedup, Offset: 2}, nil, []int64{2, 3},
			[]string{"tasks.jsonl:4", "tasks.jsonl:7"}},
		{"dedup with limit", Config{TaskIndex: TaskIndexDedup, Limit: 4}, nil, []int64{0, 1, 2}, nil},
		// The shard selects by line position; a copy in another shard is still a repeat.
		{"dedup shard 1 of 2", Config{TaskIndex: TaskIndexDedup, Shard: Shard{Index: 1, Count: 2}}, nil, []int64{1, 2}, nil},
		{"dedup shard 0 of 2", Config{TaskIndex: TaskIndexDedup, Shard: Shard{Index: 0, Count: 2}}, nil, []int64{0, 3}, nil},
		// Resume asks about the dedup index.
		{"dedup skip", Config{TaskIndex: TaskIndexDedup}, func(i int64) bool { return i < 2 }, []int64{2, 3}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Path = writeFile(t, "tasks.jsonl", dupRows)
			tasks, err := readAll(t, cfg, Options{Skip: tt.skip})
			if err != nil {
				t.Fatal(err)
			}
			if got := indexes(tasks); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("task indexes = %v, want %v", got, tt.want)
			}
			if tt.wantWhere != nil {
				var where []string
				for _, task := range tasks {
					where = append(where, task.Source[strings.LastIndex(task.Source, "/")+1:])
				}
				if !reflect.DeepEqual(where, tt.wantWhere) {
					t.Errorf("sources = %v, want %v", where, tt.wantWhere)
				}
			}
		})
	}
}

func TestTaskIndexConfig(t *testing.T) {
	c := Config{Path: "x.jsonl"}
	c.SetDefaults()
	if c.TaskIndex != TaskIndexLine {
		t.Errorf("default task_index %q", c.TaskIndex)
	}
	c.TaskIndex = "hash"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "task_index") {
		t.Errorf("Validate = %v", err)
	}
	if _, err := Open(Config{Path: writeFile(t, "t.jsonl", dupRows), TaskIndex: "hash"}, Options{}); err == nil {
		t.Error("Open accepted task_index: hash")
	}
}

func TestTaskIndexDedupBadRows(t *testing.T) {
	// A bad row is numbered like any other (its text is its key), so that
	// the indexes of later rows do not depend on on_bad_row.
	p := writeFile(t, "tasks.jsonl", "{\"q\":\"a\"}\nnot json\n{\"q\":\"a\"}\nnot json\n{\"q\":\"b\"}\n")
	tasks, err := readAll(t, Config{Path: p, TaskIndex: TaskIndexDedup, OnBadRow: "skip"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := indexes(tasks); !reflect.DeepEqual(got, []int64{0, 2}) {
		t.Errorf("task indexes = %v, want [0 2]", got)
	}
}

func TestParquetTaskIndexDedup(t *testing.T) {
	type row struct {
		Q string `parquet:"q"`
	}
	p := filepath.Join(t.TempDir(), "tasks.parquet")
	if err := pq.WriteFile(p, []row{{"a"}, {"b"}, {"a"}, {"c"}, {"b"}}); err != nil {
		t.Fatal(err)
	}
	tasks, err := readAll(t, Config{Path: p, TaskIndex: TaskIndexDedup}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := indexes(tasks); !reflect.DeepEqual(got, []int64{0, 1, 2}) {
		t.Errorf("task indexes = %v, want [0 1 2]", got)
	}
	if len(tasks) == 3 && tasks[2].Fields["q"] != "c" {
		t.Errorf("task 2 holds %v", tasks[2].Fields["q"])
	}
	// With an offset the rows before it still number the tasks.
	tasks, err = readAll(t, Config{Path: p, TaskIndex: TaskIndexDedup, Offset: 2}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := indexes(tasks); !reflect.DeepEqual(got, []int64{2}) {
		t.Errorf("with offset: task indexes = %v, want [2]", got)
	}
}
