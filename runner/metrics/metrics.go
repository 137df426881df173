package metrics

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

// Defaults of Options.
const (
	DefaultMetric    = "acc"
	DefaultThreshold = 0.0
)

// UnspecifiedReason is the filter reason counted for a dropped group whose
// rows carry none.
const UnspecifiedReason = "unspecified"

// Options choose what counts as a correct sample: a scored row is correct
// when the value of its metric Metric is > Threshold, or, when the row has
// no such metric (or Metric is empty), when its reward is > Threshold.
type Options struct {
	// Metric is the name of the correctness metric. Default "acc"; set
	// UseReward to judge by the reward alone.
	Metric string
	// Threshold is the value a sample must exceed to be correct. Default 0.
	Threshold float64
	// UseReward ignores Metric and judges every row by its reward.
	UseReward bool
	// Contiguous promises that the rows of each task (run_id, task_index)
	// are added one after another, all attempts included. The Aggregator
	// then folds a task into the totals when its last row has passed and
	// keeps about one bit per task (the set of finished tasks) instead of
	// about 40 bytes. A row of a task already finished breaks the promise:
	// Err reports it from then on, and the Result is not to be used
	// (aggregate again without Contiguous).
	Contiguous bool
}

// ErrNotContiguous is what Err reports when Options.Contiguous was set and
// the rows of a task were not added one after another.
var ErrNotContiguous = errors.New("metrics: rows of a task are not contiguous")

func (o Options) metric() string {
	if o.UseReward {
		return ""
	}
	if o.Metric == "" {
		return DefaultMetric
	}
	return o.Metric
}

// Metrics are the aggregate metrics of a set of rollouts. "Scored" rows are
// rows with status ok or filtered (a filtered row ran to its end; only its
// group was dropped). Sample statistics (tokens, turns, tool calls,
// continuity breaks) are over every row; outcome statistics (reward,
// correctness, pass@k, termination rates) over scored rows. docs/metrics.md
// defines every field.
type Metrics struct {
	// Rows is the number of rows (rollouts) seen.
	Rows int64 `json:"rows"`
	// Status counts rows by status ("ok", "error", "cancelled",
	// "filtered"; "pending" for an empty status).
	Status map[string]int64 `json:"status"`
	// ScoredRows is the number of rows with status ok or filtered.
	ScoredRows int64 `json:"scored_rows"`
	// Reward are the reward's moments over scored rows.
	Reward Moments `json:"reward"`
	// LastRun is what the run that wrote metrics.json counted of its own
	// requests; absent from what stats computes from the files.
	LastRun *RunTokens `json:"last_run,omitempty"`
	// RewardsSkipped counts scored rows whose reward is not finite or
	// beyond ±MaxReward: they are left out of Reward's moments (trajflow
	// never writes one; another writer's file may hold them).
	RewardsSkipped int64 `json:"rewards_skipped,omitempty"`
	// Correctness says how correctness was judged and how often it held.
	Correctness Correctness `json:"correctness"`
	// Tasks is the number of distinct (run_id, task_index) pairs.
	Tasks int64 `json:"tasks"`
	// TasksComplete is the number of tasks whose every row is scored.
	TasksComplete int64 `json:"tasks_complete"`
	// TaskCompletion is TasksComplete / Tasks.
	TaskCompletion float64 `json:"task_completion"`
	// AtK holds pass@k, pass^k and mean@k for k = 1, 2, 4, ... up to the
	// largest number of scored samples of a task.
	AtK []AtK `json:"at_k"`
	// Tokens are per-sample token counts.
	Tokens Tokens `json:"tokens"`
	// Turns is the number of generations per sample.
	Turns Dist `json:"turns"`
	// ToolCalls is the number of tool calls per sample.
	ToolCalls Dist `json:"tool_calls"`
	// ScoredNaturalTerminationRate is the share of scored rows the
	// environment ended (terminated and not truncated).
	ScoredNaturalTerminationRate float64 `json:"scored_natural_termination_rate"`
	// ScoredTruncationRate is the share of scored rows cut short by a
	// length limit.
	ScoredTruncationRate float64 `json:"scored_truncation_rate"`
	// MaxTurnsRate is the share of scored rows with max_turns_reached
	// (rows that took their last allowed turn).
	MaxTurnsRate float64 `json:"max_turns_rate"`
	// TokenContinuityBreaks is the sum of token_continuity_breaks over rows.
	TokenContinuityBreaks int64 `json:"token_continuity_breaks"`
	// Groups counts groups (run_id, task_index, attempt) and their fate.
	Groups Groups `json:"groups"`

	// NeMo RL's rollout metrics, under its names and with its
	// denominators: every row (sample), whatever its status.
	NeMoRL
	// PerTurn holds, for each turn t = 1, 2, … up to the largest
	// num_turns, the samples that reached it (NeMo RL's
	// active_samples_per_turn) and the tokens generated in it (NeMo RL's
	// total_gen_tokens_per_turn).
	PerTurn []TurnStats `json:"per_turn"`
	// Envs breaks every metric down per environment (the env column: the
	// route's name), as NeMo Gym's per-agent aggregates do. Absent inside
	// an environment's own metrics.
	Envs map[string]*Metrics `json:"envs,omitempty"`
	// Cost is what the rows cost (generate.price); absent when no row was
	// written with a price.
	Cost *Cost `json:"cost,omitempty"`
}

// NeMoRL are NeMo RL's rollout metrics (rollouts.py's rollout_metrics),
// each over every row: N is the number of rows.
type NeMoRL struct {
	// TotalTurns is Σ num_turns.
	TotalTurns int64 `json:"total_turns"`
	// AvgTurnsPerSample is TotalTurns / N.
	AvgTurnsPerSample float64 `json:"avg_turns_per_sample"`
	// MaxTurnsPerSample is max num_turns.
	MaxTurnsPerSample int64 `json:"max_turns_per_sample"`
	// NaturalTerminationRate is the rows that ended before the turn
	// limit ran out, terminated or truncated, / N (NeMo RL's batched
	// loop: sample_terminated |= truncated | terminated).
	NaturalTerminationRate float64 `json:"natural_termination_rate"`
	// TruncationRate is the rows cut short by max_seq_len (truncated), / N.
	TruncationRate float64 `json:"truncation_rate"`
	// MaxTurnsReachedRate is the rows that took their last allowed turn
	// (max_turns_reached, also when that turn ended them), / N (NeMo RL's
	// async loop: turn_count >= max_rollout_turns).
	MaxTurnsReachedRate float64 `json:"max_turns_reached_rate"`
	// MeanGenTokensPerSample is Σ gen_tokens / N (NeMo RL's assistant
	// tokens), over the rows whose counts are known: N less
	// TokenCountsUnknown. Null when no row's are.
	MeanGenTokensPerSample *float64 `json:"mean_gen_tokens_per_sample"`
	// MeanEnvTokensPerSample is Σ env_tokens / N, over the same rows.
	MeanEnvTokensPerSample *float64 `json:"mean_env_tokens_per_sample"`
	// MeanTotalTokensPerSample is Σ total_tokens / N (gen + env, no
	// prompt, as NeMo RL's per-sample token count), over the same rows.
	MeanTotalTokensPerSample *float64 `json:"mean_total_tokens_per_sample"`
	// TokenCountsUnknown is the rows whose training-view counts are
	// unknown (gen_tokens, env_tokens, total_tokens null: a reply came
	// without token ids), left out of the three means, of Tokens.Env and
	// of PerTurn's GenTokens. Their tokens are in Tokens.Prompt and
	// Tokens.Completion, the servers' usage.
	TokenCountsUnknown int64 `json:"token_counts_unknown"`
}

// TurnStats are the samples active at one turn and the tokens they
// generated in it.
type TurnStats struct {
	Turn int `json:"turn"`
	// ActiveSamples is the rows with num_turns >= Turn.
	ActiveSamples int64 `json:"active_samples"`
	// GenTokens is the tokens generated in turn Turn, summed over rows
	// (the turn_gen_tokens column's entry Turn-1) whose counts are known;
	// null when every active sample's are unknown.
	GenTokens *int64 `json:"gen_tokens"`
	// UnknownSamples is the active samples whose counts are unknown (no
	// token ids), left out of GenTokens.
	UnknownSamples int64 `json:"unknown_samples,omitempty"`
}

// Counts are a row's token counts of the training view (the Parquet's
// gen_tokens, total_tokens and turn_gen_tokens columns).
type Counts struct {
	GenTokens, TotalTokens int64
	// Unknown is set when the row's training-view counts are unknown
	// (null columns, pipeline.Rollout.TokenIDsMissing): GenTokens,
	// TotalTokens, TurnGenTokens and the row's EnvTokens are then not
	// counted.
	Unknown bool
	// TurnGenTokens are the tokens generated in each turn
	// (pipeline.Rollout.TurnGenTokens). Nil where unknown (schema
	// version 1 files).
	TurnGenTokens []int32
	// Price, when set, is what the row's tokens cost (the Prices its file
	// was written with); Billed, what its requests were billed for
	// (BilledOf).
	Price  *Prices
	Billed Billed
}

// seqCounts computes a rollout's Counts from its loss mask and its
// messages' spans, all but TurnGenTokens.
func seqCounts(r *pipeline.Rollout) Counts {
	if !r.SeqCountsKnown() {
		return Counts{Unknown: true}
	}
	c := Counts{TotalTokens: int64(len(r.LossMask))}
	for _, m := range r.LossMask {
		if m == 1 {
			c.GenTokens++
		}
	}
	return c
}

// RunTokens are a run's token figures beside the rows': the completion
// tokens of its answered requests, the requests it cancelled in flight
// with an estimate of their partial output, and the endpoints' own count
// of tokens generated during the run where they report one (vLLM's
// vllm:generation_tokens_total), which includes that partial output.
type RunTokens struct {
	CompletionTokens        int64  `json:"completion_tokens"`
	CancelledRequests       int64  `json:"cancelled_requests"`
	CancelledTokensEstimate int64  `json:"cancelled_tokens_estimate"`
	ServerTokens            *int64 `json:"server_tokens,omitempty"`
	// Endpoints are the HTTP endpoints' counts of this run's attempts:
	// sent, retries among them, failed, and moved off the endpoint while
	// it was silent (sent again to another); none for the simulator or
	// a client of an embedder's.
	Endpoints []EndpointCounts `json:"endpoints,omitempty"`
}

// EndpointCounts are one endpoint's counts of a run's attempts.
type EndpointCounts struct {
	Endpoint string `json:"endpoint"`
	Requests int64  `json:"requests"`
	Retries  int64  `json:"retries"`
	Failures int64  `json:"failures"`
	Moved    int64  `json:"moved"`
	// Canaries are the silence watch's canary requests sent to the
	// endpoint (one token each; not in Requests, nor in the run's
	// rollouts or tokens).
	Canaries int64 `json:"canaries"`
}

// Moments are the count, mean, population standard deviation, minimum and
// maximum of a set of numbers (all 0 when the set is empty).
type Moments struct {
	N    int64   `json:"n"`
	Mean float64 `json:"mean"`
	Std  float64 `json:"std"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

// Correctness is how correctness was judged and how often it held.
type Correctness struct {
	// Metric is the metric consulted first ("" when judged by reward only).
	Metric    string  `json:"metric"`
	Threshold float64 `json:"threshold"`
	// MetricRows and RewardRows count the scored rows judged by the metric
	// and by the reward (no such metric on the row).
	MetricRows int64 `json:"metric_rows"`
	RewardRows int64 `json:"reward_rows"`
	// Correct is the number of correct scored rows; Accuracy is Correct /
	// ScoredRows.
	Correct  int64   `json:"correct"`
	Accuracy float64 `json:"accuracy"`
}

// AtK are the metrics at one k, averaged over the Tasks tasks with at
// least k scored samples.
type AtK struct {
	K     int   `json:"k"`
	Tasks int64 `json:"tasks"`
	// PassAtK is the mean over tasks of 1 − C(n−c, k) / C(n, k): the
	// probability that at least one of k samples drawn without replacement
	// is correct.
	PassAtK float64 `json:"pass_at_k"`
	// PassHatK (pass^k) is the mean over tasks of C(c, k) / C(n, k): the
	// probability that all k samples drawn are correct.
	PassHatK float64 `json:"pass_hat_k"`
	// MeanAtK is the mean over tasks of c / n: the expected accuracy of k
	// samples drawn from the task.
	MeanAtK float64 `json:"mean_at_k"`
}

// Dist summarizes a per-sample count: total, mean, max and the
// nearest-rank 95th percentile (exact below 256, within 1/128 above).
type Dist struct {
	Total int64   `json:"total"`
	Mean  float64 `json:"mean"`
	Max   int64   `json:"max"`
	P95   int64   `json:"p95"`
}

// Tokens are per-sample token counts: Prompt and Completion the servers'
// usage (prompt_tokens, completion_tokens) over every row, Env the
// training view's observation tokens (env_tokens) over the rows whose
// counts are known (NeMoRL.TokenCountsUnknown are not), null when no
// row's are.
type Tokens struct {
	Prompt     Dist  `json:"prompt"`
	Completion Dist  `json:"completion"`
	Env        *Dist `json:"env"`
}

// Groups counts groups and their fate under the keep rule.
type Groups struct {
	Count   int64 `json:"count"`
	Kept    int64 `json:"kept"`
	Dropped int64 `json:"dropped"`
	// DroppedBy counts dropped groups by filter_reason.
	DroppedBy map[string]int64 `json:"dropped_by"`
}

// Per-task state is kept small (about 40 bytes a task with the map's own
// cost): a million tasks must not cost a run much memory.

// taskKey packs a run's index (high 16 bits) and a task index (low 48):
// room for 65,536 runs of 2^48 tasks in one aggregate.
type taskKey uint64

func newTaskKey(run int32, task int64) taskKey {
	return taskKey(uint64(run)<<48 | uint64(task)&(1<<48-1))
}

// groupKey is a task and an attempt, for tasks with several attempts.
type groupKey struct {
	task    taskKey
	attempt int32
}

// tally is a task's rows, scored rows and correct rows.
type tally struct{ rows, scored, correct int32 }

func (t *tally) add(scored, correct bool) {
	t.rows++
	if scored {
		t.scored++
	}
	if correct {
		t.correct++
	}
}

// taskCount is a task's tally and the state of its first group (most
// tasks have one).
type taskCount struct {
	tally
	attempt int32      // the first group's attempt
	group   groupState // the first group's state; 0: none yet
}

// groupState is set (bit 0), kept (bit 1) and the drop reason's index in
// Aggregator.reasons (bits 2..7).
type groupState uint8

const (
	groupSet  groupState = 1
	groupKept groupState = 2
	maxReason            = 63
)

// attemptState is a group of the open task: its attempt and state.
type attemptState struct {
	attempt int32
	state   groupState
}

// openTask is the task whose rows are being added (Options.Contiguous).
type openTask struct {
	tally
	key    taskKey
	groups []attemptState
}

// nc is a task's number of scored samples and of correct ones: the at-k
// metrics depend on nothing else.
type nc struct{ n, c int }

// totals are the per-task and per-group sums of finished tasks.
type totals struct {
	tasks, complete int64
	counts          map[nc]int64 // tasks with at least one scored row
	maxN            int
	groups, kept    int64
	droppedBy       [maxReason + 1]int64 // by reason index
}

func (t *totals) addTask(c tally) {
	t.tasks++
	if c.rows == c.scored {
		t.complete++
	}
	if c.scored > 0 {
		if t.counts == nil {
			t.counts = map[nc]int64{}
		}
		t.counts[nc{int(c.scored), int(c.correct)}]++
		t.maxN = max(t.maxN, int(c.scored))
	}
}

func (t *totals) addGroup(g groupState) {
	t.groups++
	if g&groupKept != 0 {
		t.kept++
	} else {
		t.droppedBy[g>>2]++
	}
}

func (t *totals) clone() totals {
	c := *t
	c.counts = maps.Clone(t.counts)
	return c
}

// Aggregator accumulates metrics one rollout at a time. It is not safe for
// concurrent use.
type Aggregator struct {
	opts Options

	rows, scored         int64
	status               map[string]int64
	rewardN              int64
	rewardMean, rewardM2 float64
	rewardMin, rewardMax float64
	rewardSkipped        int64
	correct              int64
	metricRows           int64
	rewardRows           int64
	natural, trunc, maxT int64
	breaks               int64
	// Over every row (NeMo RL's).
	allTerm, allTrunc, allMaxT int64
	genTok, totalTok           int64
	seqUnknown                 int64           // rows whose training-view counts are unknown
	turnUnknown                map[int32]int64 // those rows by num_turns
	turnCount                  map[int32]int64 // rows by num_turns
	turnGen                    []int64         // tokens generated by turn - 1
	turnBuf                    []int32         // Add's TurnGenTokens
	envs                       map[string]*Aggregator
	sub                        bool // an environment's own aggregator
	prompt, compl, env         dist
	turns, tools               dist
	runs                       map[string]int32
	reasons                    []string
	reasonIndex                map[string]groupState
	cost                       Cost
	besideCost                 Cost // AddCost: rows read for their cost alone

	// Without Options.Contiguous: every task's counts to the end.
	tasks  map[taskKey]taskCount
	groups map[groupKey]groupState // second and later attempts

	// With Options.Contiguous: the open task, the set of finished ones and
	// their sums.
	open     openTask
	haveOpen bool
	finished taskSet
	done     totals
	err      error
}

// New returns an Aggregator with the default Options.
func New() *Aggregator { return NewWithOptions(Options{}) }

// NewWithOptions returns an Aggregator that judges correctness by opts.
func NewWithOptions(opts Options) *Aggregator {
	a := &Aggregator{
		opts:        opts,
		status:      map[string]int64{},
		runs:        map[string]int32{},
		turnUnknown: map[int32]int64{},
		turnCount:   map[int32]int64{},
		envs:        map[string]*Aggregator{},
		reasonIndex: map[string]groupState{},
	}
	if !opts.Contiguous {
		a.tasks = map[taskKey]taskCount{}
		a.groups = map[groupKey]groupState{}
	}
	return a
}

// Err returns ErrNotContiguous (wrapped, naming the task) once a row of a
// finished task arrived under Options.Contiguous; else nil.
func (a *Aggregator) Err() error { return a.err }

// state encodes a rollout's group state.
func (a *Aggregator) state(r *pipeline.Rollout) groupState {
	if r.Kept {
		return groupSet | groupKept
	}
	reason := r.FilterReason
	if reason == "" {
		reason = UnspecifiedReason
	}
	i, ok := a.reasonIndex[reason]
	if !ok && len(a.reasons) >= maxReason {
		reason = "other"
		i, ok = a.reasonIndex[reason]
	}
	if !ok {
		i = groupState(len(a.reasons))
		a.reasons = append(a.reasons, strings.Clone(reason))
		a.reasonIndex[a.reasons[i]] = i
	}
	return groupSet | i<<2
}

// Add counts one rollout. It keeps no reference to r or to its strings, so
// r may point into reused or freed memory once Add returns.
func (a *Aggregator) Add(r *pipeline.Rollout) {
	if r == nil {
		return
	}
	c := seqCounts(r)
	if !c.Unknown {
		a.turnBuf = r.TurnGenTokens(a.turnBuf)
		c.TurnGenTokens = a.turnBuf
	}
	a.AddCounts(r, c)
}

// AddCounts is Add with the row's token counts given (a row read back
// from Parquet has no loss mask).
func (a *Aggregator) AddCounts(r *pipeline.Rollout, c Counts) {
	if r == nil || a.err != nil {
		return
	}
	if !a.sub {
		env := a.envAgg(r.Env)
		env.AddCounts(r, c)
		if env.err != nil {
			a.err = env.err
			return
		}
	}
	a.rows++
	a.addTokens(r, c)
	a.addEnding(r)
	a.addStatus(r)
	tk, taskIndex := a.taskOf(r)
	attempt := int32(r.Attempt)
	a.addCost(c)
	a.prompt.add(int64(r.PromptTokens))
	a.compl.add(int64(r.CompletionTokens))
	a.turns.add(int64(r.NumTurns))
	a.tools.add(int64(r.ToolCalls))
	a.breaks += int64(r.TokenContinuityBreaks)
	rowScored, rowCorrect := a.addScored(r)

	if a.opts.Contiguous {
		a.addContiguous(tk, taskIndex, r, attempt, rowScored, rowCorrect)
		return
	}
	a.addTaskRow(tk, r, attempt, rowScored, rowCorrect)
}

// addTokens counts a row's tokens and turns: its sequence's, or, when its
// token counts are unknown, the row among the unknown ones.
func (a *Aggregator) addTokens(r *pipeline.Rollout, c Counts) {
	if c.Unknown {
		a.seqUnknown++
		a.turnUnknown[int32(r.NumTurns)]++
	} else {
		a.genTok += c.GenTokens
		a.totalTok += c.TotalTokens
		a.env.add(int64(r.EnvTokens))
	}
	a.turnCount[int32(r.NumTurns)]++
	if n := len(c.TurnGenTokens); n > len(a.turnGen) {
		a.turnGen = append(a.turnGen, make([]int64, n-len(a.turnGen))...)
	}
	for i, g := range c.TurnGenTokens {
		a.turnGen[i] += int64(g)
	}
	// (Unknown rows have no TurnGenTokens.)
}

// addEnding counts how a row's episode ended, whatever its status.
func (a *Aggregator) addEnding(r *pipeline.Rollout) {
	if r.Terminated || r.Truncated {
		// NeMo RL's batched loop: done = truncated | terminated.
		a.allTerm++
	}
	if r.Truncated {
		a.allTrunc++
	}
	if r.MaxTurnsReached {
		a.allMaxT++
	}
}

// addStatus counts a row by its status ("pending" when it has none).
func (a *Aggregator) addStatus(r *pipeline.Rollout) {
	status := string(r.Status)
	if status == "" {
		status = "pending"
	}
	if _, ok := a.status[status]; !ok {
		status = strings.Clone(status)
	}
	a.status[status]++
}

// taskOf is the key of a row's task (its run and task index), and the
// task index.
func (a *Aggregator) taskOf(r *pipeline.Rollout) (taskKey, int64) {
	run, ok := a.runs[r.RunID]
	if !ok {
		run = int32(len(a.runs))
		a.runs[strings.Clone(r.RunID)] = run
	}
	var taskIndex int64
	if r.Task != nil {
		taskIndex = r.Task.Index
	}
	return newTaskKey(run, taskIndex), taskIndex
}

// addCost adds a priced row's billed tokens and cost.
func (a *Aggregator) addCost(c Counts) {
	if c.Price == nil {
		return
	}
	a.cost.PricedRows++
	a.cost.Billed = a.cost.Billed.Add(c.Billed)
	a.cost.Total += c.Price.Cost(c.Billed)
}

// addScored counts a scored row (status ok or filtered): its reward,
// whether it is correct, how its episode ended. It says whether the row
// is scored and whether it is correct.
func (a *Aggregator) addScored(r *pipeline.Rollout) (scored, correct bool) {
	if r.Status != pipeline.StatusOK && r.Status != pipeline.StatusFiltered {
		return false, false
	}
	a.scored++
	a.addReward(r.Reward)
	correct, byMetric := a.opts.judge(r)
	if byMetric {
		a.metricRows++
	} else {
		a.rewardRows++
	}
	if correct {
		a.correct++
	}
	if r.Terminated && !r.Truncated {
		a.natural++
	}
	if r.Truncated {
		a.trunc++
	}
	if r.MaxTurnsReached {
		a.maxT++
	}
	return true, correct
}

// addTaskRow counts a row in its task's counts, and its group's state
// when the row opens the task's first group or a later attempt's.
func (a *Aggregator) addTaskRow(tk taskKey, r *pipeline.Rollout, attempt int32, scored, correct bool) {
	tc := a.tasks[tk]
	tc.add(scored, correct)
	switch {
	case tc.group == 0:
		tc.attempt, tc.group = attempt, a.state(r)
	case tc.attempt != attempt:
		gk := groupKey{task: tk, attempt: attempt}
		if _, ok := a.groups[gk]; !ok {
			a.groups[gk] = a.state(r)
		}
	}
	a.tasks[tk] = tc
}

// addContiguous counts a row into the open task, first finishing the open
// task when the row starts another one.
func (a *Aggregator) addContiguous(tk taskKey, taskIndex int64, r *pipeline.Rollout, attempt int32, scored, correct bool) {
	if !a.haveOpen || a.open.key != tk {
		if a.haveOpen {
			a.finish()
		}
		if a.finished.has(tk) {
			a.err = fmt.Errorf("%w: task %d of run %q comes again after other tasks' rows", ErrNotContiguous, taskIndex, r.RunID)
			return
		}
		a.open = openTask{key: tk, groups: a.open.groups[:0]}
		a.haveOpen = true
	}
	t := &a.open
	t.add(scored, correct)
	if !slices.ContainsFunc(t.groups, func(g attemptState) bool { return g.attempt == attempt }) {
		t.groups = append(t.groups, attemptState{attempt: attempt, state: a.state(r)})
	}
}

// finish folds the open task into the totals and marks it finished.
func (a *Aggregator) finish() {
	foldOpen(&a.done, &a.open)
	a.finished.add(a.open.key)
	a.haveOpen = false
}

func foldOpen(t *totals, o *openTask) {
	t.addTask(o.tally)
	for _, g := range o.groups {
		t.addGroup(g.state)
	}
}

// MaxReward is the largest reward magnitude the moments take: beyond it
// the sums of squares could overflow. Larger or non-finite rewards are
// counted in Metrics.RewardsSkipped instead.
const MaxReward = 1e100

// addReward updates the reward's moments (Welford's algorithm).
func (a *Aggregator) addReward(v float64) {
	if math.IsNaN(v) || math.Abs(v) > MaxReward {
		a.rewardSkipped++
		return
	}
	a.rewardN++
	if a.rewardN == 1 {
		a.rewardMin, a.rewardMax = v, v
	} else {
		a.rewardMin = min(a.rewardMin, v)
		a.rewardMax = max(a.rewardMax, v)
	}
	d := v - a.rewardMean
	a.rewardMean += d / float64(a.rewardN)
	a.rewardM2 += d * (v - a.rewardMean)
}

// IsCorrect reports whether a scored row is correct under o: the value of
// its metric o.Metric (default "acc") is above o.Threshold or, when the
// row has no such metric (or o.UseReward), its reward is. It does not look
// at the row's status.
func (o Options) IsCorrect(r *pipeline.Rollout) bool {
	correct, _ := o.judge(r)
	return correct
}

// judge returns whether r is correct and whether its metric decided.
func (o Options) judge(r *pipeline.Rollout) (correct, byMetric bool) {
	if m := o.metric(); m != "" {
		if v, ok := r.Metrics[m]; ok {
			return v > o.Threshold, true
		}
	}
	return r.Reward > o.Threshold, false
}

// AddCost adds the cost c of rows read for their cost alone (an output
// directory's filtered/, surplus/ and errors/ rows, whose other figures
// are not the metrics'), under dir in Cost.Dirs, and, split by
// environment in envs (the env column), to each environment's cost, so
// that the environments' costs add up to the total. An environment whose
// rows were all read for their cost alone (every rollout failed) gets an
// entry of its own with no rows.
func (a *Aggregator) AddCost(dir string, c Cost, envs map[string]Cost) {
	c.Dirs = map[string]DirCost{dir: {Total: c.Total, PricedRows: c.PricedRows}}
	a.besideCost = a.besideCost.Add(c)
	if a.sub {
		return
	}
	for name, ec := range envs {
		a.envAgg(name).AddCost(dir, ec, nil)
	}
}

// envAgg is the aggregator of one environment's rows, made on first use.
func (a *Aggregator) envAgg(name string) *Aggregator {
	env, ok := a.envs[name]
	if !ok {
		env = NewWithOptions(a.opts)
		env.sub = true
		a.envs[strings.Clone(name)] = env
	}
	return env
}

// Result returns the metrics of every rollout added so far. The
// Aggregator may go on accepting rollouts.
func (a *Aggregator) Result() *Metrics {
	m := &Metrics{
		Rows:           a.rows,
		Status:         maps.Clone(a.status),
		ScoredRows:     a.scored,
		RewardsSkipped: a.rewardSkipped,
		Reward: Moments{
			N: a.rewardN, Mean: a.rewardMean,
			Min: a.rewardMin, Max: a.rewardMax,
		},
		Correctness: Correctness{
			Metric: a.opts.metric(), Threshold: a.opts.Threshold,
			MetricRows: a.metricRows, RewardRows: a.rewardRows,
			Correct: a.correct, Accuracy: ratio(a.correct, a.scored),
		},
		Tokens: Tokens{
			Prompt: a.prompt.result(), Completion: a.compl.result(),
		},
		Turns:                        a.turns.result(),
		ToolCalls:                    a.tools.result(),
		ScoredNaturalTerminationRate: ratio(a.natural, a.scored),
		ScoredTruncationRate:         ratio(a.trunc, a.scored),
		MaxTurnsRate:                 ratio(a.maxT, a.scored),
		TokenContinuityBreaks:        a.breaks,
		Groups:                       Groups{DroppedBy: map[string]int64{}},
		NeMoRL: NeMoRL{
			TotalTurns:             a.turns.sum,
			AvgTurnsPerSample:      ratio(a.turns.sum, a.rows),
			MaxTurnsPerSample:      a.turns.max,
			NaturalTerminationRate: ratio(a.allTerm, a.rows),
			TruncationRate:         ratio(a.allTrunc, a.rows),
			MaxTurnsReachedRate:    ratio(a.allMaxT, a.rows),
			TokenCountsUnknown:     a.seqUnknown,
		},
	}
	if known := a.rows - a.seqUnknown; known > 0 {
		env := a.env.result()
		m.Tokens.Env = &env
		m.MeanGenTokensPerSample = new(ratio(a.genTok, known))
		m.MeanEnvTokensPerSample = new(ratio(a.env.sum, known))
		m.MeanTotalTokensPerSample = new(ratio(a.totalTok, known))
	}
	if c := a.cost; c.PricedRows > 0 || a.besideCost.PricedRows > 0 {
		if a.besideCost.Dirs != nil {
			c.Dirs = map[string]DirCost{schema.DataDir: {Total: c.Total, PricedRows: c.PricedRows}}
		}
		c = c.Add(a.besideCost)
		m.Cost = &c
	}
	maxTurn := int32(len(a.turnGen))
	for t := range a.turnCount {
		maxTurn = max(maxTurn, t)
	}
	for t := int32(1); t <= maxTurn; t++ {
		var active int64
		for n, c := range a.turnCount {
			if n >= t {
				active += c
			}
		}
		ts := TurnStats{Turn: int(t), ActiveSamples: active}
		for n, c := range a.turnUnknown {
			if n >= t {
				ts.UnknownSamples += c
			}
		}
		if ts.UnknownSamples < active || active == 0 {
			var g int64
			if int(t) <= len(a.turnGen) {
				g = a.turnGen[t-1]
			}
			ts.GenTokens = &g
		}
		m.PerTurn = append(m.PerTurn, ts)
	}
	if len(a.envs) > 0 {
		m.Envs = make(map[string]*Metrics, len(a.envs))
		for name, env := range a.envs {
			m.Envs[name] = env.Result()
		}
	}
	if a.rewardN > 0 {
		m.Reward.Std = math.Sqrt(a.rewardM2 / float64(a.rewardN))
	}
	tot := a.totals()
	m.Tasks = tot.tasks
	m.TasksComplete = tot.complete
	m.TaskCompletion = ratio(m.TasksComplete, m.Tasks)
	m.Groups.Count, m.Groups.Kept = tot.groups, tot.kept
	m.Groups.Dropped = tot.groups - tot.kept
	for i, n := range tot.droppedBy {
		if n > 0 {
			m.Groups.DroppedBy[a.reasons[i]] = n
		}
	}

	// Tasks by (n, c): summing over sorted pairs makes the result
	// independent of the order of the rows and of the mode.
	outcomes := tot.outcomes()
	for k := 1; k <= tot.maxN; k *= 2 {
		m.AtK = append(m.AtK, AtKOf(outcomes, k))
		if k > tot.maxN/2 {
			break // the next power of two exceeds maxN (and k*2 cannot overflow)
		}
	}
	return m
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// TaskOutcome counts the tasks with N scored samples of which C are
// correct. The at-k metrics of a set of tasks depend on these counts alone.
type TaskOutcome struct {
	N, C  int
	Tasks int64
}

// TaskOutcomes returns the tasks of every rollout added so far by their
// (scored, correct) counts, sorted by N then C. Tasks without a scored
// row are left out. Its length is the number of distinct pairs, not of
// tasks.
func (a *Aggregator) TaskOutcomes() []TaskOutcome {
	return a.totals().outcomes()
}

// totals returns the per-task and per-group sums of every row added.
func (a *Aggregator) totals() totals {
	if a.opts.Contiguous {
		tot := a.done.clone()
		if a.haveOpen {
			foldOpen(&tot, &a.open)
		}
		return tot
	}
	var tot totals
	for _, t := range a.tasks {
		tot.addTask(t.tally)
		tot.addGroup(t.group)
	}
	for _, g := range a.groups {
		tot.addGroup(g)
	}
	return tot
}

// outcomes returns t's tasks by (n, c), sorted.
func (t totals) outcomes() []TaskOutcome {
	out := make([]TaskOutcome, 0, len(t.counts))
	for p, n := range t.counts {
		out = append(out, TaskOutcome{N: p.n, C: p.c, Tasks: n})
	}
	slices.SortFunc(out, func(x, y TaskOutcome) int {
		return cmp.Or(cmp.Compare(x.N, y.N), cmp.Compare(x.C, y.C))
	})
	return out
}

// AtKOf returns pass@k, pass^k and mean@k at k averaged over the tasks of
// outcomes with at least k scored samples (all 0 when there is none).
// Summing in the order of outcomes (TaskOutcomes sorts them) makes the
// result independent of the order the rows came in.
func AtKOf(outcomes []TaskOutcome, k int) AtK {
	at := AtK{K: k}
	if k < 1 {
		return at
	}
	var pass, hat, mean float64
	for _, o := range outcomes {
		if o.N < k {
			continue
		}
		w := float64(o.Tasks)
		at.Tasks += o.Tasks
		pass += w * PassAtK(o.N, o.C, k)
		hat += w * PassHatK(o.N, o.C, k)
		mean += w * float64(o.C) / float64(o.N)
	}
	if at.Tasks > 0 {
		at.PassAtK = pass / float64(at.Tasks)
		at.PassHatK = hat / float64(at.Tasks)
		at.MeanAtK = mean / float64(at.Tasks)
	}
	return at
}

// PassAtK returns the unbiased pass@k estimate of a task with n samples of
// which c are correct: 1 − C(n−c, k) / C(n, k), computed as a product of
// ratios. It returns 0 when k < 1 or k > n.
func PassAtK(n, c, k int) float64 {
	if k < 1 || k > n || c < 0 || c > n {
		return 0
	}
	return 1 - chooseRatio(n-c, n, k)
}

// PassHatK returns the unbiased pass^k estimate of a task with n samples of
// which c are correct: C(c, k) / C(n, k), computed as a product of ratios.
// It returns 0 when k < 1 or k > n.
func PassHatK(n, c, k int) float64 {
	if k < 1 || k > n || c < 0 || c > n {
		return 0
	}
	return chooseRatio(c, n, k)
}

// chooseRatio returns C(m, k) / C(n, k) for 0 <= m <= n, k <= n as
// Π_{i<k} (m−i)/(n−i): every factor is in [0, 1], so nothing overflows.
func chooseRatio(m, n, k int) float64 {
	if m < k {
		return 0
	}
	r := 1.0
	for i := 0; i < k; i++ {
		r *= float64(m-i) / float64(n-i)
	}
	return r
}

// WriteFile writes m as indented JSON to path atomically (WriteJSON).
func (m *Metrics) WriteFile(path string) error {
	if err := WriteJSON(path, m); err != nil {
		return fmt.Errorf("metrics: write %s: %w", path, err)
	}
	return nil
}

// WriteJSON writes v as indented JSON, ended by a newline, to path
// atomically (durable.WriteFile: a temporary file in the same directory,
// synced, renamed over path, the directory synced). A file replaced keeps
// its mode; a new one is 0644.
func WriteJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return durable.WriteFile(path, append(data, '\n'), 0o644)
}
