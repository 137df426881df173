package report

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
)

// lightColumns are the columns of the second pass: all light.
var lightColumns = []string{
	"run_id", "task_index", "attempt", "env", "status", "error_class",
	"reward", "metrics", "finish_reason", "num_turns", "kept",
	"prompt_tokens", "completion_tokens", "env_tokens", "total_ms",
}

// Bounds of what the light pass keeps, whatever the number of rows.
const (
	histBins    = 24 // bins of a histogram over a range
	maxExact    = 24 // distinct values shown one bar each before binning
	maxKeys     = 48 // distinct names counted (finish reasons, error classes, envs); more are "other"
	otherKey    = "(other)"
	maxTurnBars = 128 // num_turns values above are counted in the last bar
)

// counter counts names, at most maxKeys of them (the rest as otherKey).
type counter map[string]int64

func (c counter) add(name string, n int64) {
	if _, ok := c[name]; !ok {
		if len(c) >= maxKeys {
			name = otherKey
		} else {
			name = strings.Clone(name) // name points into a record's buffer
		}
	}
	c[name] += n
}

// hist is a histogram of values over [lo, hi] in histBins equal bins,
// which also counts the distinct values while there are at most maxExact
// of them (a reward of 0 or 1, say, shows as two bars, not 24 bins).
type hist struct {
	lo, hi  float64
	integer bool // bins of whole numbers
	bins    [histBins]int64
	exact   map[float64]int64 // nil once there are more than maxExact values
	n       int64
}

func newHist(lo, hi float64, integer bool) *hist {
	return &hist{lo: lo, hi: hi, integer: integer, exact: map[float64]int64{}}
}

func (h *hist) add(v float64) {
	if math.IsNaN(v) {
		return
	}
	h.n++
	if h.exact != nil {
		h.exact[v]++
		if len(h.exact) > maxExact {
			h.exact = nil
		}
	}
	i := 0
	if h.hi > h.lo {
		i = int(float64(histBins) * (v - h.lo) / (h.hi - h.lo))
	}
	h.bins[min(max(i, 0), histBins-1)]++
}

// fileStat is what one part file adds: its commit time and what it holds.
type fileStat struct {
	path      string
	mtime     time.Time
	rows      int64
	tokens    int64 // completion tokens
	groups    int64
	kept      int64 // groups whose rows are kept
	maxTotal  time.Duration
	lastGroup groupKey
	haveGroup bool
}

type groupKey struct {
	run     string
	task    int64
	attempt int32
}

// envStat is the per-environment breakdown.
type envStat struct {
	rows, scored, correct, errors int64
	kept                          int64 // rows whose group was kept
	rewardSum                     float64
	completion, turns             int64
	status                        counter
}

// candidate is a row the reservoir may show: where it is and why.
type candidate struct {
	file, row int
	kind      string
	priority  uint64
}

// sampleKinds are the kinds of rows sampled, each with its own reservoir
// so that a rare kind (errors) is shown even among millions of others.
var sampleKinds = []string{"correct", "incorrect", "error", "other"}

// collector is the state of the light pass.
type collector struct {
	opts metrics.Options

	reward           *hist
	prompt, complete *hist
	envTok           *hist
	turns            map[int]int64
	finish           counter
	errors           counter
	status           counter
	envs             map[string]*envStat
	files            []*fileStat

	rng       *rand.Rand
	reservoir map[string][]candidate // per kind, the Samples rows of highest priority
	samples   int
}

func newCollector(m *metrics.Metrics, opts Options) *collector {
	hiOf := func(d metrics.Dist) float64 { return float64(max(d.Max, 1)) }
	return &collector{
		opts:      opts.Correctness,
		reward:    newHist(m.Reward.Min, m.Reward.Max, false),
		prompt:    newHist(0, hiOf(m.Tokens.Prompt)+1, true),
		complete:  newHist(0, hiOf(m.Tokens.Completion)+1, true),
		envTok:    newHist(0, hiOf(*cmp.Or(m.Tokens.Env, &metrics.Dist{}))+1, true),
		turns:     map[int]int64{},
		finish:    counter{},
		errors:    counter{},
		status:    counter{},
		envs:      map[string]*envStat{},
		rng:       rand.New(rand.NewPCG(1, 2)), // the same sample every time
		reservoir: map[string][]candidate{},
		samples:   opts.Samples,
	}
}

// file reads the light columns of one file.
func (c *collector) file(ctx context.Context, fileIndex int, path string, opts Options) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	fs := &fileStat{path: path, mtime: st.ModTime()}
	c.files = append(c.files, fs)
	f, err := pqread.Open(path, opts.Allocator, opts.BatchRows)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer func() { _ = f.Close() }() // best effort: read only
	s, err := f.Schema()
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := schema.Check(s); err != nil {
		return fmt.Errorf("report: %s: not in trajflow's output schema: %w", path, err)
	}
	fields, err := f.Fields(lightColumns...)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	row := 0
	return f.Records(ctx, fields, func(rec arrow.Record) error {
		if err := pqread.Guard(path, "", func() error { c.record(rec, fileIndex, row, fs); return nil }); err != nil {
			return fmt.Errorf("report: unexpected column layout: %w", err)
		}
		row += int(rec.NumRows())
		return nil
	})
}

// record adds the rows of one record batch of lightColumns (in that
// order); first is the index in its file of its first row.
func (c *collector) record(rec arrow.Record, fileIndex, first int, fs *fileStat) {
	col := rec.Columns()
	runID := col[0].(*array.String)
	taskIndex := col[1].(*array.Int64)
	attempt := col[2].(*array.Int32)
	env := col[3].(*array.String)
	status := col[4].(*array.String)
	errClass := col[5].(*array.String)
	reward := col[6].(*array.Float64)
	mlist := col[7].(*array.List)
	mst := mlist.ListValues().(*array.Struct)
	mname := mst.Field(schema.MetricName).(*array.String)
	mval := mst.Field(schema.MetricValue).(*array.Float64)
	finish := col[8].(*array.String)
	numTurns := col[9].(*array.Int32)
	kept := col[10].(*array.Boolean)
	prompt := col[11].(*array.Int64)
	completion := col[12].(*array.Int64)
	envTokens := col[13].(*array.Int64)
	totalMS := col[14].(*array.Float64)

	var r pipeline.Rollout
	m := map[string]float64{}
	for i := 0; i < int(rec.NumRows()); i++ {
		clear(m)
		s, e := mlist.ValueOffsets(i)
		for j := int(s); j < int(e); j++ {
			m[mname.Value(j)] = mval.Value(j)
		}
		r.Reward, r.Metrics = reward.Value(i), m
		st := pipeline.Status(status.Value(i))
		scored := st == pipeline.StatusOK || st == pipeline.StatusFiltered
		correct := scored && c.opts.IsCorrect(&r)

		fs.rows++
		fs.tokens += completion.Value(i)
		fs.maxTotal = max(fs.maxTotal, time.Duration(totalMS.Value(i)*float64(time.Millisecond)))
		gk := groupKey{run: runID.Value(i), task: taskIndex.Value(i), attempt: attempt.Value(i)}
		if !fs.haveGroup || gk != fs.lastGroup {
			gk.run = strings.Clone(gk.run)
			fs.lastGroup, fs.haveGroup = gk, true
			fs.groups++
			if kept.Value(i) {
				fs.kept++
			}
		}

		statusName := string(st)
		if statusName == "" {
			statusName = "pending"
		}
		c.status.add(statusName, 1)
		if scored {
			c.reward.add(r.Reward)
		}
		c.prompt.add(float64(prompt.Value(i)))
		c.complete.add(float64(completion.Value(i)))
		if envTokens.IsValid(i) { // null: unknown (no token ids)
			c.envTok.add(float64(envTokens.Value(i)))
		}
		c.turns[min(int(numTurns.Value(i)), maxTurnBars)]++
		fr := finish.Value(i)
		if fr == "" {
			fr = "(none)"
		}
		c.finish.add(fr, 1)
		if st == pipeline.StatusError {
			class := errClass.Value(i)
			if class == "" {
				class = "unclassified"
			}
			c.errors.add(class, 1)
		}

		name := env.Value(i)
		if name == "" {
			name = "(none)"
		}
		es := c.envs[name]
		if es == nil {
			if len(c.envs) >= maxKeys {
				name = otherKey
				es = c.envs[name]
			}
			if es == nil {
				es = &envStat{status: counter{}}
				c.envs[strings.Clone(name)] = es
			}
		}
		es.rows++
		es.status.add(statusName, 1)
		es.completion += completion.Value(i)
		es.turns += int64(numTurns.Value(i))
		if kept.Value(i) {
			es.kept++
		}
		if st == pipeline.StatusError {
			es.errors++
		}
		if scored {
			es.scored++
			es.rewardSum += r.Reward
			if correct {
				es.correct++
			}
		}

		kind := "other"
		switch {
		case st == pipeline.StatusError:
			kind = "error"
		case correct:
			kind = "correct"
		case scored:
			kind = "incorrect"
		}
		c.offer(candidate{file: fileIndex, row: first + i, kind: kind})
	}
}

// offer puts a row into its kind's reservoir: each row gets a random
// priority and each reservoir keeps the samples rows of highest priority,
// a uniform sample of its kind without holding more than samples rows.
func (c *collector) offer(cand candidate) {
	if c.samples <= 0 {
		return
	}
	cand.priority = c.rng.Uint64()
	res := c.reservoir[cand.kind]
	if len(res) < c.samples {
		c.reservoir[cand.kind] = append(res, cand)
		return
	}
	low := 0
	for i := range res {
		if res[i].priority < res[low].priority {
			low = i
		}
	}
	if cand.priority > res[low].priority {
		res[low] = cand
	}
}

// chosen returns at most samples rows, taken from the kinds in turn (each
// kind's rows by priority) so that every kind present is shown, sorted by
// file and row.
func (c *collector) chosen() []candidate {
	lists := make([][]candidate, len(sampleKinds))
	for i, kind := range sampleKinds {
		lists[i] = slices.Clone(c.reservoir[kind])
		slices.SortFunc(lists[i], func(a, b candidate) int { return cmp.Compare(b.priority, a.priority) })
	}
	var out []candidate
	for depth := 0; len(out) < c.samples; depth++ {
		added := false
		for _, l := range lists {
			if depth < len(l) && len(out) < c.samples {
				out = append(out, l[depth])
				added = true
			}
		}
		if !added {
			break
		}
	}
	slices.SortFunc(out, func(a, b candidate) int { return cmp.Or(cmp.Compare(a.file, b.file), cmp.Compare(a.row, b.row)) })
	return out
}
