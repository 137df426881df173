package sources

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
	"go.yaml.in/yaml/v3"
)

// Shard selects a subset of the input's rows: those with
// task_index % Count == Index. In YAML it is a mapping (index, count,
// auto) or the scalar auto.
type Shard struct {
	// Index is this process's shard, 0 <= index < count.
	Index int `yaml:"index"`
	// Count is the number of shards the input is split into.
	Count int `yaml:"count"`
	// Auto takes Index (and Count, unless set) from the scheduler's
	// environment when the run starts (shard: auto is short for
	// {auto: true}).
	Auto bool `yaml:"auto"`
	// From names the environment variables Resolve took the shard from
	// ("" when the config gave it).
	From string `yaml:"-"`
}

// UnmarshalYAML reads the scalar form "auto" and the mapping form.
func (s *Shard) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		if n.Value != "auto" {
			return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q: want auto, or a mapping of index and count", n.Line, n.Value)}}
		}
		*s = Shard{Auto: true}
		return nil
	}
	type plain Shard
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*s = Shard(p)
	return nil
}

// Sharded reports whether the shard is one of several (or auto, whose
// count the environment gives).
func (s Shard) Sharded() bool { return s.Auto || s.Count > 1 }

func (s Shard) validate(p *pipeline.Problems) {
	if s.Auto {
		if s.Count < 0 {
			p.Add("shard.count", "must be >= 1 (or unset, to take it from the environment), got %d", s.Count)
		}
		if s.Index != 0 {
			p.Add("shard.index", "is taken from the environment with shard auto; leave it unset")
		}
		return
	}
	if s.Count < 1 {
		p.Add("shard.count", "must be >= 1, got %d", s.Count)
	} else if s.Index < 0 || s.Index >= s.Count {
		p.Add("shard.index", "must be in [0, %d), got %d", s.Count, s.Index)
	}
}

// Environment variables Resolve reads.
const (
	EnvSlurmTaskID    = "SLURM_ARRAY_TASK_ID"
	EnvSlurmTaskCount = "SLURM_ARRAY_TASK_COUNT"
	EnvSlurmTaskMin   = "SLURM_ARRAY_TASK_MIN"
	EnvSlurmTaskMax   = "SLURM_ARRAY_TASK_MAX"
	EnvJobIndex       = "JOB_COMPLETION_INDEX" // Kubernetes Indexed Job
	EnvShardCount     = "TRAJFLOW_SHARD_COUNT"
	EnvRank           = "RANK"
	EnvWorldSize      = "WORLD_SIZE"
)

// Resolve returns the shard with its index and count filled from the
// environment (looked up with lookup, e.g. os.LookupEnv) when it is auto;
// any other shard is returned as it is. The first of these that is set
// gives the shard:
//
//   - SLURM_ARRAY_TASK_ID, with SLURM_ARRAY_TASK_COUNT or
//     SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_MAX: the index is the task
//     id less the array's minimum (0 when unset), the count
//     SLURM_ARRAY_TASK_COUNT or MAX-MIN+1;
//   - JOB_COMPLETION_INDEX (a Kubernetes Indexed Job), with the count from
//     shard.count or TRAJFLOW_SHARD_COUNT;
//   - RANK, with WORLD_SIZE.
//
// shard.count and TRAJFLOW_SHARD_COUNT, where set, must agree with the
// count found. The error is a *pipeline.KeyError on "shard" that names the
// variables it looked at.
func (s Shard) Resolve(lookup func(string) (string, bool)) (Shard, error) {
	if !s.Auto {
		return s, nil
	}
	fail := func(format string, args ...any) (Shard, error) {
		return s, &pipeline.KeyError{Key: "shard", Msg: "auto: " + fmt.Sprintf(format, args...)}
	}
	num := func(name string) (int, bool, error) {
		v, ok := lookup(name)
		if !ok || strings.TrimSpace(v) == "" {
			return 0, false, nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return 0, true, fmt.Errorf("%s=%q is not a whole number >= 0", name, v)
		}
		return n, true, nil
	}
	var (
		index, count int
		from         []string
	)
	slurmID, hasSlurm, err := num(EnvSlurmTaskID)
	if err != nil {
		return fail("%v", err)
	}
	jobIndex, hasJob, err := num(EnvJobIndex)
	if err != nil {
		return fail("%v", err)
	}
	rank, hasRank, err := num(EnvRank)
	if err != nil {
		return fail("%v", err)
	}
	envCount, hasEnvCount, err := num(EnvShardCount)
	if err != nil {
		return fail("%v", err)
	}
	switch {
	case hasSlurm:
		n, hasN, err := num(EnvSlurmTaskCount)
		if err != nil {
			return fail("%v", err)
		}
		lo, hasMin, err := num(EnvSlurmTaskMin)
		if err != nil {
			return fail("%v", err)
		}
		hi, hasMax, err := num(EnvSlurmTaskMax)
		if err != nil {
			return fail("%v", err)
		}
		from = append(from, fmt.Sprintf("%s=%d", EnvSlurmTaskID, slurmID))
		index = slurmID
		if hasMin {
			index = slurmID - lo
			from = append(from, fmt.Sprintf("%s=%d", EnvSlurmTaskMin, lo))
		}
		switch {
		case hasN:
			count = n
			from = append(from, fmt.Sprintf("%s=%d", EnvSlurmTaskCount, n))
			if hasMin && hasMax && hi-lo+1 != n {
				return fail("%s=%d but %s=%d and %s=%d span %d tasks (an array with steps is not a shard set: use --array=0-%d)",
					EnvSlurmTaskCount, n, EnvSlurmTaskMin, lo, EnvSlurmTaskMax, hi, hi-lo+1, n-1)
			}
		case hasMin && hasMax:
			count = hi - lo + 1
			from = append(from, fmt.Sprintf("%s=%d", EnvSlurmTaskMax, hi))
		default:
			return fail("%s is set but neither %s nor %s and %s are: the shard count is unknown",
				EnvSlurmTaskID, EnvSlurmTaskCount, EnvSlurmTaskMin, EnvSlurmTaskMax)
		}
	case hasJob:
		index = jobIndex
		from = append(from, fmt.Sprintf("%s=%d", EnvJobIndex, jobIndex))
		switch {
		case s.Count > 0:
			count = s.Count
			from = append(from, fmt.Sprintf("shard.count=%d", count))
		case hasEnvCount:
			count = envCount
			from = append(from, fmt.Sprintf("%s=%d", EnvShardCount, count))
		default:
			return fail("%s=%d is set but the shard count is not: set source.shard.count or %s (the Job's completions)",
				EnvJobIndex, jobIndex, EnvShardCount)
		}
	case hasRank:
		n, hasN, err := num(EnvWorldSize)
		if err != nil {
			return fail("%v", err)
		}
		if !hasN {
			return fail("%s=%d is set but %s is not", EnvRank, rank, EnvWorldSize)
		}
		index, count = rank, n
		from = append(from, fmt.Sprintf("%s=%d", EnvRank, rank), fmt.Sprintf("%s=%d", EnvWorldSize, n))
	default:
		return fail("no shard in the environment: looked at %s (with %s, or %s and %s), %s (with source.shard.count or %s), %s (with %s); none is set",
			EnvSlurmTaskID, EnvSlurmTaskCount, EnvSlurmTaskMin, EnvSlurmTaskMax, EnvJobIndex, EnvShardCount, EnvRank, EnvWorldSize)
	}
	where := strings.Join(from, ", ")
	if count < 1 {
		return fail("the shard count is %d (%s): must be >= 1", count, where)
	}
	if index < 0 || index >= count {
		return fail("the shard index %d is not in [0, %d) (%s)", index, count, where)
	}
	if s.Count > 0 && s.Count != count {
		return fail("shard.count is %d but the environment gives %d (%s)", s.Count, count, where)
	}
	if hasEnvCount && envCount != count {
		return fail("%s=%d but the environment gives %d shards (%s)", EnvShardCount, envCount, count, where)
	}
	return Shard{Index: index, Count: count, From: where}, nil
}
