package analyze

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
)

// StatsOptions configure Stats.
type StatsOptions struct {
	// JSON prints the metrics as indented JSON instead of a table.
	JSON bool
	// Correctness chooses the correctness metric and threshold.
	Correctness metrics.Options
	// Allocator allocates the read buffers. Default memory.DefaultAllocator.
	Allocator memory.Allocator
	// BatchRows is the number of rows per record batch read. Default 4096.
	BatchRows int
}

// statsColumns are the columns metrics.Aggregator reads.
var statsColumns = []string{
	"run_id", "task_index", "attempt", "status", "reward", "metrics",
	"terminated", "truncated", "max_turns_reached", "num_turns",
	"token_continuity_breaks", "tool_calls", "kept", "filter_reason",
	"prompt_tokens", "completion_tokens", "env_tokens", "env",
}

// statsColumnsV2 are read where the file has them (schema version 2).
var statsColumnsV2 = []string{"gen_tokens", "total_tokens", "turn_gen_tokens"}

// Stats computes the aggregate metrics of the rows in paths (output
// directories or Parquet files, see ResolveFiles) and prints them to out
// (a table, or JSON with opts.JSON; nothing when out is nil). It reads
// only the columns the metrics need, one record batch at a time, and gives
// the same Metrics as a metrics.Aggregator fed the same rollouts in file
// order.
func Stats(ctx context.Context, paths []string, out io.Writer, opts StatsOptions) (*metrics.Metrics, error) {
	agg, err := Aggregate(ctx, paths, opts)
	if err != nil {
		return nil, err
	}
	m := agg.Result()
	if out != nil {
		if opts.JSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			err = enc.Encode(m)
		} else {
			err = m.WriteText(out)
		}
		if err != nil {
			return m, fmt.Errorf("analyze: print stats: %w", err)
		}
	}
	return m, nil
}

// Aggregate is the pass of Stats without the printing: it returns the
// aggregator fed every row of paths, whose Result is what Stats returns and
// whose TaskOutcomes give the at-k metrics at any k. opts.JSON is ignored.
func Aggregate(ctx context.Context, paths []string, opts StatsOptions) (*metrics.Aggregator, error) {
	files, err := ResolveFiles(paths)
	if err != nil {
		return nil, err
	}
	// Rows of a task are contiguous in what one run commits (a group is
	// written whole, and a task's attempts follow each other): the
	// aggregator then keeps about a bit per task. Files whose tasks
	// interleave (a run's data/ and filtered/ together, say) are read again
	// with per-task counts.
	agg, err := statsFiles(ctx, files, opts, true)
	if errors.Is(err, metrics.ErrNotContiguous) {
		agg, err = statsFiles(ctx, files, opts, false)
	}
	if err != nil {
		return nil, err
	}
	// The rows an output directory committed beside data/ (errors/,
	// filtered/, surplus/) were paid for: their cost is the run's too.
	if err := addBesideCost(ctx, paths, agg, opts); err != nil {
		return nil, err
	}
	return agg, nil
}

// statsFiles feeds the rows of files to an aggregator. With contiguous it
// stops after the record batch holding the first row that breaks
// Options.Contiguous and returns metrics.ErrNotContiguous.
func statsFiles(ctx context.Context, files []string, opts StatsOptions, contiguous bool) (*metrics.Aggregator, error) {
	mo := opts.Correctness
	mo.Contiguous = contiguous
	agg := metrics.NewWithOptions(mo)
	for _, path := range files {
		if err := statsFile(ctx, path, agg, opts); err != nil {
			return nil, err
		}
	}
	return agg, nil
}

func statsFile(ctx context.Context, path string, agg *metrics.Aggregator, opts StatsOptions) error {
	f, err := openFile(path, opts.Allocator, opts.BatchRows)
	if err != nil {
		return err
	}
	defer f.close()
	cols := statsColumns
	if f.version != schema.VersionV1 {
		cols = append(slices.Clone(cols), statsColumnsV2...)
	}
	leaves, err := f.fields(cols)
	if err != nil {
		return err
	}
	var d statsDecoder
	if v, ok := f.meta[schema.KeyPrice]; ok {
		var p metrics.Prices
		if err := json.Unmarshal([]byte(v), &p); err != nil {
			return fmt.Errorf("analyze: %s: %s is unreadable: %w", path, schema.KeyPrice, err)
		}
		d.price = &p
	}
	return f.records(ctx, leaves, func(rec arrow.Record) error {
		if err := d.add(rec, agg); err != nil {
			return fmt.Errorf("analyze: %s: %w", path, err)
		}
		if err := agg.Err(); err != nil {
			return fmt.Errorf("analyze: %s: %w", path, err) // no use reading on
		}
		return nil
	})
}

// statsDecoder turns records of statsColumns into rollouts carrying the
// fields the aggregator reads. The rollout, its task and metrics map are
// reused from row to row.
type statsDecoder struct {
	task    pipeline.Task
	r       pipeline.Rollout
	metrics map[string]float64
	// price is the prices the file was written with (schema.KeyPrice),
	// nil without.
	price *metrics.Prices
}

func (d *statsDecoder) add(rec arrow.Record, agg *metrics.Aggregator) (err error) {
	// The column types were checked by schema.Check; a failed
	// assertion here is a reader surprise, reported rather than fatal.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("unexpected column layout: %v", p)
		}
	}()
	col := func(name string) arrow.Array {
		idx := rec.Schema().FieldIndices(name)
		if len(idx) == 0 {
			panic(fmt.Sprintf("column %q not read", name))
		}
		return rec.Column(idx[0])
	}
	runID := col("run_id").(*array.String)
	taskIndex := col("task_index").(*array.Int64)
	attempt := col("attempt").(*array.Int32)
	status := col("status").(*array.String)
	reward := col("reward").(*array.Float64)
	mlist := col("metrics").(*array.List)
	mst := mlist.ListValues().(*array.Struct)
	mname := mst.Field(schema.MetricName).(*array.String)
	mval := mst.Field(schema.MetricValue).(*array.Float64)
	terminated := col("terminated").(*array.Boolean)
	truncated := col("truncated").(*array.Boolean)
	maxTurns := col("max_turns_reached").(*array.Boolean)
	numTurns := col("num_turns").(*array.Int32)
	breaks := col("token_continuity_breaks").(*array.Int32)
	tools := col("tool_calls").(*array.Int32)
	kept := col("kept").(*array.Boolean)
	reason := col("filter_reason").(*array.String)
	prompt := col("prompt_tokens").(*array.Int64)
	completion := col("completion_tokens").(*array.Int64)
	env := col("env_tokens").(*array.Int64)
	envName := col("env").(*array.String)
	// Schema version 1 has no gen_tokens, total_tokens, turn_gen_tokens:
	// its generated tokens are completion_tokens, its total completion +
	// env tokens, and its tokens per turn are unknown.
	var gen, total *array.Int64
	var turnGen *array.List
	var turnGenVals []int32
	if idx := rec.Schema().FieldIndices(schema.ColumnName(schema.ColGenTokens)); len(idx) > 0 {
		gen = rec.Column(idx[0]).(*array.Int64)
		total = col("total_tokens").(*array.Int64)
		turnGen = col("turn_gen_tokens").(*array.List)
		turnGenVals = turnGen.ListValues().(*array.Int32).Int32Values()
	}

	if d.metrics == nil {
		d.metrics = map[string]float64{}
	}
	defer clear(d.metrics) // its keys point into rec's buffers
	r := &d.r
	r.Task = &d.task
	for i := 0; i < int(rec.NumRows()); i++ {
		d.task.Index = taskIndex.Value(i)
		clear(d.metrics)
		s, e := mlist.ValueOffsets(i)
		for j := int(s); j < int(e); j++ {
			d.metrics[mname.Value(j)] = mval.Value(j)
		}
		r.RunID = runID.Value(i)
		r.Attempt = int(attempt.Value(i))
		r.Status = pipeline.Status(status.Value(i))
		r.Reward = reward.Value(i)
		r.Metrics = d.metrics
		r.Terminated = terminated.Value(i)
		r.Truncated = truncated.Value(i)
		r.MaxTurnsReached = maxTurns.Value(i)
		r.NumTurns = int(numTurns.Value(i))
		r.TokenContinuityBreaks = int(breaks.Value(i))
		r.ToolCalls = int(tools.Value(i))
		r.Kept = kept.Value(i)
		r.FilterReason = reason.Value(i)
		r.PromptTokens = int(prompt.Value(i))
		r.CompletionTokens = int(completion.Value(i))
		r.EnvTokens = int(env.Value(i))
		r.Env = envName.Value(i)
		c := metrics.Counts{GenTokens: int64(r.CompletionTokens), TotalTokens: int64(r.CompletionTokens + r.EnvTokens)}
		switch {
		case gen != nil && gen.IsNull(i):
			// Unknown (schema version 5: a reply came without token
			// ids): left out of the training view's figures, never
			// counted as 0.
			r.EnvTokens = 0
			c = metrics.Counts{Unknown: true}
		case gen != nil:
			s, e := turnGen.ValueOffsets(i)
			c = metrics.Counts{GenTokens: gen.Value(i), TotalTokens: total.Value(i), TurnGenTokens: turnGenVals[s:e:e]}
		}
		if d.price != nil {
			c.Price, c.Billed = d.price, metrics.BilledOf(r)
		}
		agg.AddCounts(r, c)
	}
	r.RunID, r.Status, r.FilterReason, r.Env = "", "", "", ""
	return nil
}
