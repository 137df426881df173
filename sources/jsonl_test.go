package sources

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

// writeFile writes content to name in a fresh temporary directory.
func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// readAll reads every task, returning the error that ended the read (nil
// at io.EOF).
func readAll(t testing.TB, cfg Config, opts Options) ([]*pipeline.Task, error) {
	t.Helper()
	r, err := Open(cfg, opts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []*pipeline.Task
	for {
		task, err := r.Next(context.Background())
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, task)
	}
}

func indexes(tasks []*pipeline.Task) []int64 {
	out := []int64{}
	for _, t := range tasks {
		out = append(out, t.Index)
	}
	return out
}

func TestJSONLRows(t *testing.T) {
	tests := []struct {
		name   string
		row    string
		msgs   []pipeline.Message
		params map[string]any
		tools  []string
	}{
		{
			name: "plain row without messages",
			row:  `{"question": "2+2?", "expected_answer": 4}`,
		},
		{
			name: "plain row with messages",
			row:  `{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "id": 7}`,
			msgs: []pipeline.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}},
		},
		{
			name: "content parts are joined with newlines",
			row:  `{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}`,
			msgs: []pipeline.Message{{Role: "user", Content: "a\nb"}},
		},
		{
			name: "empty messages list is no messages",
			row:  `{"messages": [], "question": "q"}`,
		},
		{
			name: "assistant tool calls and tool answers",
			row: `{"messages": [{"role": "user", "content": "w?"},
				{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{\"x\":1}"}}]},
				{"role": "tool", "tool_call_id": "c1", "content": "sunny"}]}`,
			msgs: []pipeline.Message{
				{Role: "user", Content: "w?"},
				{Role: "assistant", ToolCalls: []pipeline.ToolCall{{ID: "c1", Type: "function", Name: "get", Arguments: `{"x":1}`}}},
				{Role: "tool", ToolCallID: "c1", Content: "sunny"},
			},
		},
		{
			name:  "plain row tools",
			row:   `{"messages": "hello", "tools": [{"type": "function", "function": {"name": "f"}}]}`,
			msgs:  []pipeline.Message{{Role: "user", Content: "hello"}},
			tools: []string{`{"function":{"name":"f"},"type":"function"}`},
		},
		{
			name: "NeMo Gym row",
			row: `{"responses_create_params": {"input": [{"role": "user", "content": "What is 2+2?"}], "temperature": 0.7, "max_output_tokens": 512},
				"expected_answer": "4", "agent_ref": {"name": "math"}}`,
			msgs:   []pipeline.Message{{Role: "user", Content: "What is 2+2?"}},
			params: map[string]any{"temperature": json.Number("0.7"), "max_tokens": json.Number("512")},
		},
		{
			name:   "NeMo Gym string input and instructions",
			row:    `{"responses_create_params": {"input": "Say hi", "instructions": "You are terse.", "reasoning": {"effort": "low"}}}`,
			msgs:   []pipeline.Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "Say hi"}},
			params: map[string]any{"reasoning_effort": "low"},
		},
		{
			name: "NeMo Gym Responses items and tools",
			row: `{"responses_create_params": {"input": [
				{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
				{"type": "reasoning", "summary": []},
				{"type": "function_call", "call_id": "c1", "name": "get", "arguments": "{}"},
				{"type": "function_call", "call_id": "c2", "name": "put", "arguments": "{}"},
				{"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
				"tools": [{"type": "function", "name": "get", "parameters": {"type": "object"}}]}}`,
			msgs: []pipeline.Message{
				{Role: "user", Content: "weather?"},
				{Role: "assistant", ToolCalls: []pipeline.ToolCall{
					{ID: "c1", Type: "function", Name: "get", Arguments: "{}"},
					{ID: "c2", Type: "function", Name: "put", Arguments: "{}"},
				}},
				{Role: "tool", ToolCallID: "c1", Content: "sunny"},
			},
			tools: []string{`{"function":{"name":"get","parameters":{"type":"object"}},"type":"function"}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, "tasks.jsonl", strings.ReplaceAll(tt.row, "\n", " ")+"\n")
			tasks, err := readAll(t, Config{Path: p}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(tasks) != 1 {
				t.Fatalf("got %d tasks, want 1", len(tasks))
			}
			task := tasks[0]
			if task.Index != 0 || task.Source != p+":1" {
				t.Errorf("index %d source %q, want 0 and %q", task.Index, task.Source, p+":1")
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, []byte(strings.ReplaceAll(tt.row, "\n", " "))); err != nil {
				t.Fatal(err)
			}
			if string(task.Raw) != compact.String() {
				t.Errorf("raw = %s, want %s", task.Raw, compact.String())
			}
			if !reflect.DeepEqual(task.Messages, tt.msgs) {
				t.Errorf("messages = %+v, want %+v", task.Messages, tt.msgs)
			}
			if !reflect.DeepEqual(task.Params, tt.params) {
				t.Errorf("params = %#v, want %#v", task.Params, tt.params)
			}
			var tools []string
			for _, tl := range task.Tools {
				tools = append(tools, string(tl))
			}
			if !reflect.DeepEqual(tools, tt.tools) {
				t.Errorf("tools = %v, want %v", tools, tt.tools)
			}
		})
	}
}

func TestJSONLFieldsKeepNumbersAsWritten(t *testing.T) {
	p := writeFile(t, "tasks.jsonl", `{"a": 1.50, "b": 12345678901234567890, "c": {"d": [1, "x"]}}`)
	tasks, err := readAll(t, Config{Path: p}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := tasks[0].Fields
	if f["a"] != json.Number("1.50") || f["b"] != json.Number("12345678901234567890") {
		t.Errorf("numbers = %#v %#v", f["a"], f["b"])
	}
	want := map[string]any{"d": []any{json.Number("1"), "x"}}
	if !reflect.DeepEqual(f["c"], want) {
		t.Errorf("c = %#v, want %#v", f["c"], want)
	}
}

// tenRows has ten rows (task indexes 0..9), with blank lines that take no
// index, CRLF endings and no final newline.
const tenRows = "{\"i\":0}\n\n{\"i\":1}\r\n{\"i\":2}\n   \n{\"i\":3}\n{\"i\":4}\n{\"i\":5}\n{\"i\":6}\n{\"i\":7}\n{\"i\":8}\n{\"i\":9}"

func TestSelection(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		skip func(int64) bool
		want []int64
	}{
		{"all", Config{}, nil, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{"limit", Config{Limit: 3}, nil, []int64{0, 1, 2}},
		{"offset", Config{Offset: 7}, nil, []int64{7, 8, 9}},
		{"offset and limit", Config{Offset: 2, Limit: 3}, nil, []int64{2, 3, 4}},
		{"limit past the end", Config{Offset: 8, Limit: 5}, nil, []int64{8, 9}},
		{"offset past the end", Config{Offset: 20}, nil, []int64{}},
		{"shard 0 of 3", Config{Shard: Shard{Index: 0, Count: 3}}, nil, []int64{0, 3, 6, 9}},
		{"shard 2 of 3", Config{Shard: Shard{Index: 2, Count: 3}}, nil, []int64{2, 5, 8}},
		{"shard within window", Config{Offset: 1, Limit: 6, Shard: Shard{Index: 1, Count: 2}}, nil, []int64{1, 3, 5}},
		{"skip (resume)", Config{Limit: 5}, func(i int64) bool { return i%2 == 0 }, []int64{1, 3}},
	}
	for _, format := range []string{"jsonl", "gz"} {
		for _, tt := range tests {
			t.Run(format+"/"+tt.name, func(t *testing.T) {
				cfg := tt.cfg
				if format == "gz" {
					cfg.Path = writeGzip(t, "tasks.jsonl.gz", tenRows)
				} else {
					cfg.Path = writeFile(t, "tasks.jsonl", tenRows)
				}
				tasks, err := readAll(t, cfg, Options{Skip: tt.skip})
				if err != nil {
					t.Fatal(err)
				}
				if got := indexes(tasks); !reflect.DeepEqual(got, tt.want) {
					t.Errorf("task indexes = %v, want %v", got, tt.want)
				}
				for _, task := range tasks {
					if got := task.Fields["i"]; got != json.Number(string(rune('0'+task.Index))) {
						t.Errorf("task %d holds row %v", task.Index, got)
					}
				}
			})
		}
	}
}

func TestSourceNamesPhysicalLines(t *testing.T) {
	p := writeFile(t, "tasks.jsonl", tenRows)
	tasks, err := readAll(t, Config{Path: p, Limit: 4}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, task := range tasks {
		got = append(got, strings.TrimPrefix(task.Source, p))
	}
	want := []string{":1", ":3", ":4", ":6"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sources = %v, want %v", got, want)
	}
}

func writeGzip(t testing.TB, name, content string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(content))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return writeFile(t, name, buf.String())
}

func TestGzipDetectedByContent(t *testing.T) {
	// A gzip file without .gz in its name (format given) is still read.
	p := writeGzip(t, "tasks.data", `{"q":"a"}`+"\n")
	tasks, err := readAll(t, Config{Path: p, Format: "jsonl"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1 || tasks[0].Fields["q"] != "a" {
		t.Fatalf("tasks = %+v", tasks)
	}
}

func TestLongLine(t *testing.T) {
	long := strings.Repeat("x", 300<<10) // beyond the read buffer
	p := writeFile(t, "tasks.jsonl", `{"a":"`+long+`"}`+"\n"+`{"a":"b"}`+"\n")
	tasks, err := readAll(t, Config{Path: p}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 2 || tasks[0].Fields["a"] != long || tasks[1].Fields["a"] != "b" {
		t.Fatalf("got %d tasks", len(tasks))
	}
}

const badRows = `{"ok": 0}
{"ok": 1
[1, 2]
{"messages": [{"role": "wizard", "content": "x"}]}
{"messages": 5}
{"responses_create_params": {"temperature": 1}}
{"responses_create_params": {"input": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]}}
{"ok": 2} {"ok": 3}
{"ok": 4}
`

func TestBadRows(t *testing.T) {
	wantReasons := []struct{ line, reason string }{
		{"2", "invalid JSON: unexpected end of JSON input"},
		{"3", "row is a list, want a JSON object (JSONL holds one object per line, not a JSON array)"},
		{"4", `messages[0].role: unknown role "wizard" (want system, developer, user, assistant or tool)`},
		{"5", "messages: want a list of messages or a string, got a number"},
		{"6", `responses_create_params: missing "input" (the messages)`},
		{"7", `responses_create_params.input[0].content[0].image_url: want a data:image/...;base64, URL or an http(s) URL, got "x"`},
		{"8", "invalid JSON: more than one value on the line"},
	}
	t.Run("error", func(t *testing.T) {
		p := writeFile(t, "tasks.jsonl", badRows)
		tasks, err := readAll(t, Config{Path: p, OnBadRow: "error"}, Options{})
		want := p + ":2: invalid JSON: unexpected end of JSON input"
		if err == nil || err.Error() != want {
			t.Fatalf("err = %v, want %s", err, want)
		}
		var re *RowError
		if !errors.As(err, &re) || re.Where != p+":2" {
			t.Errorf("err is not a RowError naming line 2: %#v", err)
		}
		if len(tasks) != 1 {
			t.Errorf("read %d tasks before the bad row, want 1", len(tasks))
		}
	})
	t.Run("each row alone", func(t *testing.T) {
		lines := strings.Split(badRows, "\n")
		for _, w := range wantReasons {
			n := int(w.line[0] - '0')
			p := writeFile(t, "t.jsonl", lines[n-1])
			_, err := readAll(t, Config{Path: p}, Options{})
			want := p + ":1: " + w.reason
			if err == nil || err.Error() != want {
				t.Errorf("line %s: err = %v\nwant %s", w.line, err, want)
			}
		}
	})
	t.Run("skip", func(t *testing.T) {
		p := writeFile(t, "tasks.jsonl", badRows)
		var rejects []Reject
		tasks, err := readAll(t, Config{Path: p, OnBadRow: "skip"}, Options{
			OnReject: func(r Reject) error { rejects = append(rejects, r); return nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := indexes(tasks); !reflect.DeepEqual(got, []int64{0, 8}) {
			t.Errorf("kept task indexes %v, want [0 8]", got)
		}
		lines := strings.Split(badRows, "\n")
		if len(rejects) != len(wantReasons) {
			t.Fatalf("got %d rejects, want %d: %+v", len(rejects), len(wantReasons), rejects)
		}
		for i, w := range wantReasons {
			r := rejects[i]
			n := int(w.line[0] - '0')
			if r.Where != p+":"+w.line || r.Reason != w.reason || string(r.Raw) != lines[n-1] {
				t.Errorf("reject %d = %+v, want line %s %q", i, r, w.line, w.reason)
			}
		}
	})
	t.Run("skip with failing OnReject stops", func(t *testing.T) {
		p := writeFile(t, "tasks.jsonl", badRows)
		boom := errors.New("disk full")
		tasks, err := readAll(t, Config{Path: p, OnBadRow: "skip"}, Options{
			OnReject: func(Reject) error { return boom },
		})
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), p+":2") {
			t.Fatalf("err = %v, want disk full naming line 2", err)
		}
		if len(tasks) != 1 {
			t.Errorf("read %d tasks, want 1", len(tasks))
		}
	})
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	empty := writeFile(t, "empty.jsonl", "")
	blankOnly := writeFile(t, "blank.jsonl", "\n  \n\n")
	noExt := writeFile(t, "tasks.txt", "{}\n")
	badGzip := writeFile(t, "bad.jsonl.gz", "\x1f\x8bnot gzip at all")
	notParquet := writeFile(t, "tasks.parquet", "this is not parquet")
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error (from Open or the first Next)
	}{
		{"no path", Config{}, "source.path: required"},
		{"missing", Config{Path: filepath.Join(dir, "nope.jsonl")}, "nope.jsonl: no such file"},
		{"directory", Config{Path: dir, Format: "jsonl"}, dir + " is a directory"},
		{"empty", Config{Path: empty}, empty + ": no rows"},
		{"blank lines only", Config{Path: blankOnly}, blankOnly + ": no rows"},
		{"unknown extension", Config{Path: noExt}, noExt + ": cannot tell the format"},
		{"bad format", Config{Path: noExt, Format: "csv"}, `source.format: "csv" is not one of jsonl, parquet`},
		{"bad on_bad_row", Config{Path: empty, OnBadRow: "ignore"}, "source.on_bad_row"},
		{"negative limit", Config{Path: empty, Limit: -1}, "source.limit: must be >= 0"},
		{"bad shard", Config{Path: empty, Shard: Shard{Index: 3, Count: 2}}, "source.shard.index: must be in [0, 2)"},
		{"bad gzip", Config{Path: badGzip}, badGzip},
		{"not parquet", Config{Path: notParquet}, notParquet + ": not a readable Parquet file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readAll(t, tt.cfg, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestNextAfterEndAndCancel(t *testing.T) {
	p := writeFile(t, "tasks.jsonl", tenRows)
	r, err := Open(Config{Path: p, Limit: 1}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := r.Next(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := r.Next(ctx); err != io.EOF {
			t.Fatalf("err = %v, want io.EOF", err)
		}
	}
	r2, _ := Open(Config{Path: p}, Options{})
	defer r2.Close()
	cancel()
	if _, err := r2.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// FuzzJSONL feeds arbitrary bytes as a JSONL file: the reader must never
// panic, every error must name the file, and every task must be an object
// row with its line.
func FuzzJSONL(f *testing.F) {
	f.Add([]byte(tenRows))
	f.Add([]byte(badRows))
	f.Add([]byte(`{"responses_create_params": {"input": [{"type": "function_call", "name": "f", "arguments": {"a": 1}}]}}`))
	f.Add([]byte("\xef\xbb\xbf{\"messages\": [{\"role\": \"user\", \"content\": [\"a\", {\"text\": \"b\"}]}]}"))
	f.Add([]byte("\x1f\x8b\x08\x00"))
	f.Add([]byte("{\"a\":1}\n\x00\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "fuzz.jsonl")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{"error", "skip"} {
			var rejects int
			tasks, err := readAll(t, Config{Path: p, OnBadRow: mode}, Options{
				OnReject: func(r Reject) error {
					if !strings.HasPrefix(r.Where, p+":") || r.Reason == "" {
						t.Errorf("reject without file:line or reason: %+v", r)
					}
					rejects++
					return nil
				},
			})
			if err != nil && !strings.Contains(err.Error(), p) {
				t.Errorf("error does not name the file: %v", err)
			}
			var re *RowError
			if errors.As(err, &re) && !strings.HasPrefix(re.Where, p+":") {
				t.Errorf("row error does not name file:line: %v", err)
			}
			for i, task := range tasks {
				if task.Fields == nil || !json.Valid(task.Raw) || !strings.HasPrefix(task.Source, p+":") {
					t.Errorf("bad task %+v", task)
				}
				if i > 0 && task.Index <= tasks[i-1].Index {
					t.Errorf("task indexes not increasing")
				}
			}
			if mode == "skip" && re != nil {
				t.Errorf("skip mode stopped at a bad row: %v", err)
			}
		}
	})
}

// TestMaxLineBytes: a line over source.max_line_bytes is a bad row naming
// its file and line, read past without being held: an error, or under
// on_bad_row: skip a reject keeping its first KiB; a line at the limit is
// read.
func TestMaxLineBytes(t *testing.T) {
	const limit = 100 << 10
	atLimit := `{"a":"` + strings.Repeat("y", limit-8) + `"}`
	if len(atLimit) != limit {
		t.Fatalf("fixture: %d bytes", len(atLimit))
	}
	long := `{"a":"` + strings.Repeat("x", 3*limit) + `"}`
	p := writeFile(t, "tasks.jsonl", `{"a":"first"}`+"\n"+long+"\n"+atLimit+"\r\n"+`{"a":"last"}`+"\n"+long)
	_, err := readAll(t, Config{Path: p, MaxLineBytes: limit}, Options{})
	var re *RowError
	if !errors.As(err, &re) || re.Where != p+":2" || !strings.Contains(err.Error(), "longer than source.max_line_bytes (102400 bytes)") {
		t.Fatalf("err %v", err)
	}
	var rejects []Reject
	tasks, err := readAll(t, Config{Path: p, MaxLineBytes: limit, OnBadRow: "skip"}, Options{OnReject: func(r Reject) error {
		rejects = append(rejects, r)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := indexes(tasks); !reflect.DeepEqual(got, []int64{0, 2, 3}) || tasks[1].Fields["a"] != strings.Repeat("y", limit-8) {
		t.Fatalf("tasks %v", got)
	}
	if len(rejects) != 2 || rejects[0].Where != p+":2" || rejects[1].Where != p+":5" || len(rejects[0].Raw) != 1<<10 {
		t.Fatalf("rejects %d: %+v", len(rejects), rejects)
	}
}

// TestMaxLineBytesMemory: reading past a 48 MiB line under a 1 MiB limit
// allocates about the limit, not the line.
func TestMaxLineBytesMemory(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "big.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("z"), 1<<20)
	f.WriteString(`{"a":"`)
	for range 48 {
		f.Write(chunk)
	}
	f.WriteString("\"}\n{\"a\":\"b\"}\n")
	f.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tasks, err := readAll(t, Config{Path: f.Name(), MaxLineBytes: 1 << 20, OnBadRow: "skip"}, Options{})
	runtime.ReadMemStats(&after)
	if err != nil || len(tasks) != 1 {
		t.Fatalf("%d tasks, %v", len(tasks), err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Fatalf("%d MiB allocated to read past a 48 MiB line", alloc>>20)
	}
}

// A row seed beyond 64 bits is a bad row, never silently replaced.
func TestRowSeedOutOfRange(t *testing.T) {
	p := writeFile(t, "tasks.jsonl", `{"responses_create_params": {"input": "hi", "seed": 7}}`+"\n"+
		`{"responses_create_params": {"input": "hi", "seed": 99999999999999999999}}`+"\n")
	tasks, err := readAll(t, Config{Path: p}, Options{})
	var re *RowError
	if len(tasks) != 1 || !errors.As(err, &re) || re.Where != p+":2" || !strings.Contains(err.Error(), "responses_create_params.seed: 99999999999999999999 is not a 64-bit integer") {
		t.Fatalf("%d tasks, err %v", len(tasks), err)
	}
}
