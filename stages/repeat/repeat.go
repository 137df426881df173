package repeat

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"github.com/trajflow/trajflow/pipeline"
)

// Seed modes.
const (
	SeedOffset = "offset"
	SeedHash   = "hash"
)

// Expander turns a task into the rollouts of one attempt. It is immutable
// and safe for concurrent use.
type Expander struct {
	n                 int
	seed              int64
	hash              bool
	overrideRowSeed   bool
	sendSeed          bool // a seed is configured
	addSeed           bool // the seed goes into NeMo Gym's responses_create_params (add_seed)
	params            map[string]any
	runID, env, model string
}

// New returns an expander for the repeat config; runID, env and model are
// stamped on every rollout. An n below 1 counts as 1; a seed mode other than
// hash means offset (config validation rejects both).
func New(cfg Config, runID, env, model string) *Expander {
	n := cfg.N
	if n < 1 {
		n = 1
	}
	return &Expander{n: n, seed: cfg.Seed, hash: cfg.SeedMode == SeedHash, overrideRowSeed: cfg.OverrideRowSeed, sendSeed: cfg.SeedConfigured(), addSeed: cfg.AddSeed, runID: runID, env: env, model: model}
}

// N is the group size.
func (e *Expander) N() int { return e.n }

// Expand returns the n rollouts of the task's given attempt, in rollout
// index order. Each rollout owns a copy of the task's messages.
// WithParams sets the config's request parameters (generate.params) the
// rollouts carry as ConfigParams, and returns e. params is shared by every
// rollout: it must not change afterwards.
func (e *Expander) WithParams(params map[string]any) *Expander {
	e.params = params
	return e
}

func (e *Expander) Expand(task *pipeline.Task, attempt int) []*pipeline.Rollout {
	group := GroupID(task.Index, attempt)
	env := e.env
	if task.Env != "" {
		env = task.Env // the row's environment route
	}
	rowSeed, hasRowSeed := RowSeed(task)
	hasRowSeed = hasRowSeed && !e.overrideRowSeed
	out := make([]*pipeline.Rollout, e.n)
	for i := range out {
		seed := rowSeed
		if !hasRowSeed {
			seed = e.Seed(task.Index, attempt, i)
		}
		out[i] = &pipeline.Rollout{
			RunID:        e.runID,
			Task:         task,
			Attempt:      attempt,
			RolloutIndex: i,
			GroupSize:    e.n,
			GroupID:      group,
			TrajID:       group + "-r" + strconv.Itoa(i),
			Seed:         seed,
			NoSeed:       !hasRowSeed && !e.sendSeed,
			GymSeed:      e.addSeed,
			ConfigParams: e.params,
			Env:          env,
			Model:        e.model,
			Messages:     cloneMessages(task.Messages),
			// The row's own stop strings (NeMo RL's stop_strings) until
			// the environment changes them.
			StopStrings: slices.Clone(task.StopStrings),
		}
	}
	return out
}

// RowSeed is the task's own seed: an integer seed among its request
// params (a NeMo Gym row's responses_create_params.seed). A missing, null
// or non-integer seed is no row seed.
func RowSeed(task *pipeline.Task) (int64, bool) {
	if task == nil {
		return 0, false
	}
	switch x := task.Params["seed"].(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
			return int64(x), true
		}
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, true
		}
	}
	return 0, false
}

// Seed is the seed of one rollout. Offset mode: seed + attempt·n +
// rollout_index, so attempts never reuse a seed of the same task. Hash mode:
// a 63-bit (non-negative) splitmix64 hash of seed, task index, attempt and
// rollout index, so tasks do not share seeds either.
func (e *Expander) Seed(taskIndex int64, attempt, rolloutIndex int) int64 {
	if !e.hash {
		return e.seed + int64(attempt)*int64(e.n) + int64(rolloutIndex)
	}
	h := mix(uint64(e.seed))
	h = mix(h ^ uint64(taskIndex))
	h = mix(h ^ uint64(attempt))
	h = mix(h ^ uint64(rolloutIndex))
	return int64(h >> 1)
}

// mix is splitmix64's finalizer over x plus its increment.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// GroupID names a group: "t17-a0" for task 17, attempt 0.
func GroupID(taskIndex int64, attempt int) string {
	return "t" + strconv.FormatInt(taskIndex, 10) + "-a" + strconv.Itoa(attempt)
}

// cloneMessages copies messages and the slices inside them, so a rollout
// can append to and edit its messages without touching its siblings'.
func cloneMessages(msgs []pipeline.Message) []pipeline.Message {
	if msgs == nil {
		return nil
	}
	// Room for the first reply, which every rollout that generates appends.
	out := make([]pipeline.Message, len(msgs), len(msgs)+1)
	for i, m := range msgs {
		if m.ToolCalls != nil {
			m.ToolCalls = append([]pipeline.ToolCall(nil), m.ToolCalls...)
		}
		if m.TokenIDs != nil {
			m.TokenIDs = append([]int32(nil), m.TokenIDs...)
		}
		if m.Logprobs != nil {
			m.Logprobs = append([]float32(nil), m.Logprobs...)
		}
		out[i] = m
	}
	return out
}

// RetrySeed is the seed of a failed sample's retry-th retry: a mix of
// the sample's seed and retry, so retries never repeat the seed that failed.
func RetrySeed(seed int64, retry int) int64 {
	z := uint64(seed) + uint64(retry)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return int64((z ^ (z >> 31)) >> 1)
}
