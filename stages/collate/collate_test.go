package collate_test

import (
	"fmt"
	"github.com/trajflow/trajflow/schema"
	"reflect"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/arrowmem"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/stages/collate"
)

// The column names the output contract fixes.
var contractColumns = []string{
	"run_id", "task_index", "attempt", "rollout_index", "group_id", "traj_id", "seed",
	"env", "model", "task", "messages",
	"prompt_token_ids", "response_token_ids", "loss_mask", "response_logprobs",
	"reward", "turn_rewards", "metrics", "status", "error", "finish_reason",
	"terminated", "truncated", "max_turns_reached", "num_turns", "token_continuity_breaks",
	"group_reward_mean", "group_reward_std", "advantage", "kept", "filter_reason",
	"prompt_tokens", "completion_tokens", "env_tokens", "gen_tokens", "total_tokens", "gen_ms", "env_ms", "total_ms",
	"error_class", "tool_calls",
}

func TestSchemaHasContractColumns(t *testing.T) {
	s := schema.Schema()
	for _, name := range contractColumns {
		if idx := s.FieldIndices(name); len(idx) != 1 {
			t.Errorf("column %q appears %d times, want once", name, len(idx))
		}
	}
	nullable := map[string]bool{"temperature": true, "top_p": true, "top_k": true, "max_tokens": true,
		"env_tokens": true, "gen_tokens": true, "total_tokens": true, "routed_experts": true}
	for _, f := range s.Fields() {
		if f.Nullable != nullable[f.Name] {
			t.Errorf("column %q: nullable %v", f.Name, f.Nullable)
		}
	}
	msgFields := schema.Schema().Field(schema.ColMessages).Type.(*arrow.ListType).Elem().(*arrow.StructType).Fields()
	var names []string
	for _, f := range msgFields {
		names = append(names, f.Name)
	}
	want := []string{"role", "content", "tool_calls", "tool_call_id", "name", "token_start", "token_end", "turn", "parts"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("messages fields = %v, want %v", names, want)
	}
	if err := schema.Check(s); err != nil {
		t.Errorf("CheckSchema(schema.Schema()) = %v", err)
	}
}

func TestLightColumnsComeFirst(t *testing.T) {
	light := schema.LightColumns()
	for i, name := range light {
		if schema.Schema().Field(i).Name != name {
			t.Fatalf("light column %d = %q, schema has %q", i, name, schema.Schema().Field(i).Name)
		}
	}
	heavy := map[string]bool{"task": true, "messages": true, "prompt_token_ids": true,
		"response_token_ids": true, "loss_mask": true, "response_logprobs": true, "error": true, "policy_versions": true, "segments": true, "routed_experts": true}
	for _, name := range light {
		if heavy[name] {
			t.Errorf("heavy column %q listed as light", name)
		}
	}
	if len(light)+len(heavy) != schema.Schema().NumFields() {
		t.Errorf("%d light + %d heavy != %d columns", len(light), len(heavy), schema.Schema().NumFields())
	}
}

func TestBatchesNeverSplitGroups(t *testing.T) {
	tests := []struct {
		name      string
		batchRows int
		groupSize int
		groups    int
		want      []int64 // rows per record, Flush last
	}{
		{"exact", 8, 4, 4, []int64{8, 8}},
		{"overshoot", 5, 3, 4, []int64{6, 6}},
		{"remainder", 8, 3, 5, []int64{9, 6}},
		{"one row per batch", 1, 2, 3, []int64{2, 2, 2}},
		{"all in flush", 100, 4, 2, []int64{8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer alloc.AssertSize(t, 0)
			c := collate.New(alloc, tt.batchRows)
			defer c.Release()
			var got []int64
			collect := func(rec arrow.Record) {
				if rec == nil {
					return
				}
				defer rec.Release()
				got = append(got, rec.NumRows())
				rs, err := schema.Rollouts(rec)
				if err != nil {
					t.Fatal(err)
				}
				// Every record holds whole groups.
				count := map[int64]int{}
				for _, r := range rs {
					count[r.Task.Index]++
				}
				for ti, n := range count {
					if n != tt.groupSize {
						t.Errorf("record holds %d rows of task %d, want %d", n, ti, tt.groupSize)
					}
				}
			}
			for g := range tt.groups {
				collect(c.Add(pipelinetest.Group(int64(g), tt.groupSize, 200)))
			}
			collect(c.Flush())
			if c.Flush() != nil {
				t.Error("second Flush returned a record")
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("rows per record = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRoundTripValues(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	c := collate.New(alloc, 1000)
	defer c.Release()
	var want []*pipeline.Rollout
	for g := range 3 {
		grp := pipelinetest.Group(int64(g), 4, 1024)
		want = append(want, grp.Rollouts...)
		if rec := c.Add(grp); rec != nil {
			t.Fatal("record before batchRows")
		}
	}
	// A rollout with nothing set but its task still makes a full row.
	empty := &pipeline.Rollout{Task: &pipeline.Task{Index: 99}}
	want = append(want, empty)
	c.Add(&pipeline.Group{Rollouts: []*pipeline.Rollout{empty, nil}})

	rec := c.Flush()
	defer rec.Release()
	got, err := schema.Rollouts(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("row %d differs:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
	if got[1].Messages[2].ToolCalls[0].Name != "calc" {
		t.Errorf("tool call lost: %+v", got[1].Messages[2])
	}
}

// Rows staged for one record must not leak into the next: every record of
// a run of small batches decodes to its own rollouts.
func TestRoundTripAcrossBatches(t *testing.T) {
	alloc := memory.NewCheckedAllocator(arrowmem.New(0))
	t.Cleanup(func() { alloc.AssertSize(t, 0) })
	c := collate.New(alloc, 5)
	defer c.Release()
	var want, got []*pipeline.Rollout
	collect := func(rec arrow.Record) {
		t.Helper()
		if rec == nil {
			return
		}
		// The decoded rollouts view the record's buffers: keep it until
		// they are compared.
		t.Cleanup(rec.Release)
		rs, err := schema.Rollouts(rec)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rs...)
	}
	for g := range 7 {
		grp := pipelinetest.Group(int64(g), 2+g%3, 300)
		want = append(want, grp.Rollouts...)
		collect(c.Add(grp))
	}
	collect(c.Flush())
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		a, b := reflect.ValueOf(*got[i]), reflect.ValueOf(*want[i])
		for f := range a.NumField() {
			if !reflect.DeepEqual(a.Field(f).Interface(), b.Field(f).Interface()) {
				t.Errorf("row %d field %s: got %v, want %v", i, a.Type().Field(f).Name, a.Field(f).Interface(), b.Field(f).Interface())
			}
		}
	}
}

func TestCheckSchemaNamesColumn(t *testing.T) {
	fields := schema.Schema().Fields()
	fields[schema.ColReward].Type = arrow.PrimitiveTypes.Float32
	err := schema.Check(arrow.NewSchema(fields, nil))
	if err == nil || err.Error() != `column "reward" has type float32, want float64 (schema version 7)` {
		t.Errorf("CheckSchema = %v", err)
	}
	if err := schema.Check(arrow.NewSchema(fields[:3], nil)); err == nil {
		t.Error("CheckSchema accepted 3 columns")
	}
}

// The token counts are computed from the training view, prompt left out:
// gen_tokens the loss-mask-1 tokens, env_tokens the loss-mask-0 ones,
// total_tokens both.
func TestTokenCounts(t *testing.T) {
	tests := []struct {
		name            string
		prompt, resp    int
		mask            []int8
		gen, env, total int64
		// missing: a reply came without token ids; the counts are null
		// and turn_gen_tokens empty.
		missing bool
	}{
		{"no token ids", 0, 0, nil, 0, 0, 0, false},
		{"prompt only", 5, 0, nil, 0, 0, 0, false},
		{"one turn", 5, 4, []int8{1, 1, 1, 1}, 4, 0, 4, false},
		{"turns and observations", 5, 9, []int8{1, 1, 0, 0, 0, 1, 1, 0, 0}, 4, 5, 9, false},
		{"nothing generated", 2, 3, []int8{0, 0, 0}, 0, 3, 3, false},
		{"replies without ids", 0, 0, nil, 0, 0, 0, true},
		{"ids of some turns only", 5, 2, []int8{1, 1}, 0, 0, 0, true},
	}
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	c := collate.New(alloc, 100)
	defer c.Release()
	for i, tt := range tests {
		r := &pipeline.Rollout{Task: &pipeline.Task{Index: int64(i)},
			PromptTokenIDs: make([]int32, tt.prompt), ResponseTokenIDs: make([]int32, tt.resp),
			LossMask: tt.mask, ResponseLogprobs: make([]float32, tt.resp),
			EnvTokens: 1000, // the stage's own count is not what is written
			NumTurns:  2, TokenIDsMissing: tt.missing,
			Messages: []pipeline.Message{{Role: pipeline.RoleAssistant, Turn: 1}, {Role: pipeline.RoleAssistant, Turn: 2}}}
		if gen, total := collate.SeqTokens(r); !tt.missing && (int64(gen) != tt.gen || int64(total) != tt.total) {
			t.Errorf("%s: SeqTokens = %d, %d; want %d, %d", tt.name, gen, total, tt.gen, tt.total)
		}
		c.Add(&pipeline.Group{Rollouts: []*pipeline.Rollout{r}})
	}
	rec := c.Flush()
	defer rec.Release()
	col := func(i int) *array.Int64 { return rec.Column(i).(*array.Int64) }
	turnGen := rec.Column(schema.ColTurnGenTokens).(*array.List)
	back, err := schema.Rollouts(rec)
	if err != nil {
		t.Fatal(err)
	}
	for i, tt := range tests {
		cols := []*array.Int64{col(schema.ColGenTokens), col(schema.ColEnvTokens), col(schema.ColTotalTokens)}
		s, e := turnGen.ValueOffsets(i)
		if back[i].TokenIDsMissing != tt.missing {
			t.Errorf("%s: decoded TokenIDsMissing = %v", tt.name, back[i].TokenIDsMissing)
		}
		if tt.missing {
			for k, c := range cols {
				if !c.IsNull(i) {
					t.Errorf("%s: count %d = %d, want null", tt.name, k, c.Value(i))
				}
			}
			if e != s {
				t.Errorf("%s: turn_gen_tokens has %d entries, want none", tt.name, e-s)
			}
			continue
		}
		got := [3]int64{cols[0].Value(i), cols[1].Value(i), cols[2].Value(i)}
		if want := [3]int64{tt.gen, tt.env, tt.total}; got != want || cols[0].IsNull(i) || cols[1].IsNull(i) || cols[2].IsNull(i) {
			t.Errorf("%s: gen, env, total tokens = %v, want %v", tt.name, got, want)
		}
		if e-s != 2 {
			t.Errorf("%s: turn_gen_tokens has %d entries, want one per turn", tt.name, e-s)
		}
	}
}

// Messages are written as spans: the decoder restores their token ids and
// logprobs from the training view, and a message whose span is empty gets
// none, whatever copy it held.
func TestSpans(t *testing.T) {
	prompt := []int32{10, 11, 12, 13}
	resp := []int32{20, 21, 22, 30, 31, 23, 24}
	lp := []float32{-1, -2, -3, 0, 0, -4, -5}
	mask := []int8{1, 1, 1, 0, 0, 1, 1}
	msgs := []pipeline.Message{
		{Role: "system", TokenStart: 0, TokenEnd: 1},
		{Role: "user", TokenStart: 1, TokenEnd: 4},
		{Role: "assistant", Turn: 1, TokenStart: 4, TokenEnd: 7},
		{Role: "tool", Turn: 1, TokenStart: 7, TokenEnd: 9},
		{Role: "assistant", Turn: 2, TokenStart: 9, TokenEnd: 11},
		// Spans of the live pipeline before the token-exact work: empty,
		// with a copy that is not written.
		{Role: "user", Turn: 2, TokenIDs: []int32{7, 7}},
		// A span across the end of the prompt (a template's generation
		// prompt counted with the message).
		{Role: "user", Turn: 2, TokenStart: 3, TokenEnd: 5},
	}
	want := []struct {
		ids []int32
		lp  []float32
	}{
		{[]int32{10}, nil},
		{[]int32{11, 12, 13}, nil},
		{[]int32{20, 21, 22}, []float32{-1, -2, -3}},
		{[]int32{30, 31}, nil},
		{[]int32{23, 24}, []float32{-4, -5}},
		{nil, nil},
		{[]int32{13, 20}, nil},
	}
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	c := collate.New(alloc, 1)
	defer c.Release()
	rec := c.Add(&pipeline.Group{Rollouts: []*pipeline.Rollout{{Task: &pipeline.Task{}, Messages: msgs,
		PromptTokenIDs: prompt, ResponseTokenIDs: resp, ResponseLogprobs: lp, LossMask: mask}}})
	defer rec.Release()
	rs, err := schema.Rollouts(rec)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range rs[0].Messages {
		if m.TokenStart != msgs[i].TokenStart || m.TokenEnd != msgs[i].TokenEnd {
			t.Errorf("message %d: span [%d, %d), want [%d, %d)", i, m.TokenStart, m.TokenEnd, msgs[i].TokenStart, msgs[i].TokenEnd)
		}
		if !reflect.DeepEqual(m.TokenIDs, want[i].ids) || !reflect.DeepEqual(m.Logprobs, want[i].lp) {
			t.Errorf("message %d: ids %v logprobs %v, want %v %v", i, m.TokenIDs, m.Logprobs, want[i].ids, want[i].lp)
		}
	}
}

// A span outside the sequence is written as given; the decoder refuses
// it, naming the row and the message.
func TestBadSpan(t *testing.T) {
	for _, span := range [][2]int32{{2, 9}, {-1, 2}, {3, 1}} {
		alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
		c := collate.New(alloc, 1)
		r := &pipeline.Rollout{Task: &pipeline.Task{Index: 4}, PromptTokenIDs: []int32{1, 2}, ResponseTokenIDs: []int32{3, 4},
			Messages: []pipeline.Message{{Role: "user"}, {Role: "assistant", TokenStart: span[0], TokenEnd: span[1]}}}
		rec := c.Add(&pipeline.Group{Rollouts: []*pipeline.Rollout{r}})
		_, err := schema.Rollouts(rec)
		want := fmt.Sprintf("row 0 (task 4 attempt 0 rollout 0) message 1: token span [%d, %d) does not lie in the sequence of 4 tokens", span[0], span[1])
		if err == nil || err.Error() != want {
			t.Errorf("span %v: got %v, want %q", span, err, want)
		}
		rec.Release()
		c.Release()
		alloc.AssertSize(t, 0)
	}
}

func BenchmarkCollate(b *testing.B) {
	groups := make([]*pipeline.Group, 64)
	for i := range groups {
		groups[i] = pipelinetest.Group(int64(i), 8, 8192)
	}
	c := collate.New(memory.NewGoAllocator(), 1024)
	defer c.Release()
	b.SetBytes(8 * 8192)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if rec := c.Add(groups[i%len(groups)]); rec != nil {
			rec.Release()
		}
	}
}

func ExampleCollator() {
	c := collate.New(memory.NewGoAllocator(), 4)
	defer c.Release()
	for task := range int64(3) {
		if rec := c.Add(pipelinetest.Group(task, 3, 100)); rec != nil {
			fmt.Println("batch of", rec.NumRows(), "rows")
			rec.Release()
		}
	}
	if rec := c.Flush(); rec != nil {
		fmt.Println("last batch of", rec.NumRows(), "rows")
		rec.Release()
	}
	// Output:
	// batch of 6 rows
	// last batch of 3 rows
}

// BenchmarkCollateSmall is the overhead benchmark's shape: groups of 4
// short single-turn rollouts (~600 bytes of payload), batches of 128 rows
// released at once (as the sink does), on Go's allocator and on the
// recycling one trajflow runs with. It reports allocations per row.
func BenchmarkCollateSmall(b *testing.B) {
	groups := make([]*pipeline.Group, 64)
	for i := range groups {
		groups[i] = pipelinetest.Group(int64(i), 4, 600)
	}
	for _, alloc := range []struct {
		name string
		mem  memory.Allocator
	}{{"go", memory.NewGoAllocator()}, {"pool", arrowmem.New(0)}} {
		b.Run(alloc.name, func(b *testing.B) {
			c := collate.New(alloc.mem, 128)
			defer c.Release()
			b.ReportAllocs()
			rows := 0
			for b.Loop() {
				g := groups[rows/4%len(groups)]
				rows += len(g.Rollouts)
				if rec := c.Add(g); rec != nil {
					rec.Release()
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rows), "ns/row")
		})
	}
}

// TestBatchesCutByBytes: a record is handed out at the batch's text size
// whatever its rows, and Fits says when buffered rows must go first so
// that a record never holds more than MaxBytes of text.
func TestBatchesCutByBytes(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	c := collate.New(alloc, 1000)
	defer c.Release()
	g := func(i int64) *pipeline.Group { return pipelinetest.Group(i, 2, 200) }
	one := collate.GroupBytes(g(0))
	if one < 2*256 {
		t.Fatalf("a group of 2 rows counts %d bytes", one)
	}
	// Batches of about 2 groups, records of at most 3.
	c.SetBytes(2*one, 3*one+one/2)
	var rows []int64
	emit := func(rec arrow.Record) {
		if rec != nil {
			rows = append(rows, rec.NumRows())
			rec.Release()
		}
	}
	for i := range int64(5) {
		if !c.Fits(g(i)) {
			t.Fatalf("group %d does not fit %d buffered bytes", i, c.Bytes())
		}
		emit(c.Add(g(i)))
	}
	emit(c.Flush())
	if !reflect.DeepEqual(rows, []int64{4, 4, 2}) {
		t.Fatalf("rows per record %v, want [4 4 2]", rows)
	}
	// A group over MaxBytes fits nothing, not even an empty Collator.
	big := g(9)
	big.Rollouts[0].Messages = append(big.Rollouts[0].Messages, pipeline.Message{Role: "assistant", Content: string(make([]byte, 4*one))})
	if c.Fits(big) || collate.GroupBytes(big) <= c.MaxBytes() {
		t.Fatalf("a group of %d bytes fits a limit of %d", collate.GroupBytes(big), c.MaxBytes())
	}
	// Invalid UTF-8 counts three times (each byte may become U+FFFD).
	r := &pipeline.Rollout{Messages: []pipeline.Message{{Content: "\xff\xfe"}}}
	if n := collate.RowBytes(r); n != 256+6 {
		t.Fatalf("RowBytes %d", n)
	}
}
