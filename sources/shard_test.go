package sources_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sources"
	"go.yaml.in/yaml/v3"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestShardResolve(t *testing.T) {
	auto := sources.Shard{Auto: true}
	for _, tc := range []struct {
		name         string
		shard        sources.Shard
		env          func(string) (string, bool)
		index, count int
		err          []string // substrings of the error
	}{
		{"slurm count", auto, env("SLURM_ARRAY_TASK_ID", "2", "SLURM_ARRAY_TASK_COUNT", "4"), 2, 4, nil},
		{"slurm min max", auto, env("SLURM_ARRAY_TASK_ID", "3", "SLURM_ARRAY_TASK_MIN", "1", "SLURM_ARRAY_TASK_MAX", "4"), 2, 4, nil},
		{"slurm count and min", auto, env("SLURM_ARRAY_TASK_ID", "4", "SLURM_ARRAY_TASK_COUNT", "4", "SLURM_ARRAY_TASK_MIN", "1", "SLURM_ARRAY_TASK_MAX", "4"), 3, 4, nil},
		{"slurm with step", auto, env("SLURM_ARRAY_TASK_ID", "2", "SLURM_ARRAY_TASK_COUNT", "3", "SLURM_ARRAY_TASK_MIN", "0", "SLURM_ARRAY_TASK_MAX", "4"), 0, 0, []string{"SLURM_ARRAY_TASK_COUNT=3", "span 5"}},
		{"slurm without count", auto, env("SLURM_ARRAY_TASK_ID", "2"), 0, 0, []string{"SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN"}},
		{"slurm index out of range", auto, env("SLURM_ARRAY_TASK_ID", "4", "SLURM_ARRAY_TASK_COUNT", "4"), 0, 0, []string{"index 4 is not in [0, 4)"}},
		{"slurm not a number", auto, env("SLURM_ARRAY_TASK_ID", "x", "SLURM_ARRAY_TASK_COUNT", "4"), 0, 0, []string{`SLURM_ARRAY_TASK_ID="x"`}},
		{"slurm and config count agree", sources.Shard{Auto: true, Count: 4}, env("SLURM_ARRAY_TASK_ID", "1", "SLURM_ARRAY_TASK_COUNT", "4"), 1, 4, nil},
		{"slurm and config count differ", sources.Shard{Auto: true, Count: 8}, env("SLURM_ARRAY_TASK_ID", "1", "SLURM_ARRAY_TASK_COUNT", "4"), 0, 0, []string{"shard.count is 8", "gives 4"}},
		{"slurm and TRAJFLOW_SHARD_COUNT differ", auto, env("SLURM_ARRAY_TASK_ID", "1", "SLURM_ARRAY_TASK_COUNT", "4", "TRAJFLOW_SHARD_COUNT", "5"), 0, 0, []string{"TRAJFLOW_SHARD_COUNT=5"}},
		{"k8s env count", auto, env("JOB_COMPLETION_INDEX", "7", "TRAJFLOW_SHARD_COUNT", "16"), 7, 16, nil},
		{"k8s config count", sources.Shard{Auto: true, Count: 16}, env("JOB_COMPLETION_INDEX", "0"), 0, 16, nil},
		{"k8s no count", auto, env("JOB_COMPLETION_INDEX", "0"), 0, 0, []string{"source.shard.count", "TRAJFLOW_SHARD_COUNT"}},
		{"k8s counts differ", sources.Shard{Auto: true, Count: 16}, env("JOB_COMPLETION_INDEX", "0", "TRAJFLOW_SHARD_COUNT", "8"), 0, 0, []string{"TRAJFLOW_SHARD_COUNT=8", "16"}},
		{"rank", auto, env("RANK", "3", "WORLD_SIZE", "8"), 3, 8, nil},
		{"rank without world size", auto, env("RANK", "3"), 0, 0, []string{"WORLD_SIZE"}},
		{"nothing set", auto, env(), 0, 0, []string{"SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX", "RANK", "none is set"}},
		{"not auto", sources.Shard{Index: 1, Count: 3}, env("SLURM_ARRAY_TASK_ID", "2", "SLURM_ARRAY_TASK_COUNT", "4"), 1, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.shard.Resolve(tc.env)
			if len(tc.err) > 0 {
				var ke *pipeline.KeyError
				if err == nil || !errors.As(err, &ke) || ke.Key != "shard" {
					t.Fatalf("error = %v, want a KeyError on shard", err)
				}
				for _, s := range tc.err {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Index != tc.index || got.Count != tc.count || got.Auto {
				t.Errorf("got %+v, want index %d count %d, not auto", got, tc.index, tc.count)
			}
			if tc.shard.Auto && got.From == "" {
				t.Error("From does not name the variables")
			}
		})
	}
}

func TestShardYAML(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want sources.Shard
		err  string
	}{
		{"shard: auto", sources.Shard{Auto: true}, ""},
		{"shard: {index: 1, count: 3}", sources.Shard{Index: 1, Count: 3}, ""},
		{"shard: {auto: true, count: 16}", sources.Shard{Auto: true, Count: 16}, ""},
		{"shard: autox", sources.Shard{}, `line 1: "autox": want auto`},
		{"shard: 3", sources.Shard{}, `"3": want auto`},
	} {
		var c struct {
			Shard sources.Shard `yaml:"shard"`
		}
		err := yaml.Unmarshal([]byte(tc.src), &c)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error = %v, want %q", tc.src, err, tc.err)
			}
			continue
		}
		if err != nil || c.Shard != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.src, c.Shard, err, tc.want)
		}
	}
}

func FuzzShardYAML(f *testing.F) {
	for _, s := range []string{"auto", "{index: 1, count: 3}", "{auto: true}", "x", "[1]", "~"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var s sources.Shard
		_ = yaml.Unmarshal([]byte(v), &s) // must not panic
		if s.Auto && v != "auto" && !strings.Contains(v, "auto") {
			t.Fatalf("%q decoded as auto", v)
		}
	})
}

func FuzzShardResolve(f *testing.F) {
	f.Add("2", "4", "", "", "", "")
	f.Add("", "", "3", "16", "", "")
	f.Add("", "", "", "", "1", "2")
	f.Fuzz(func(t *testing.T, id, n, job, count, rank, world string) {
		e := map[string]string{}
		for k, v := range map[string]string{"SLURM_ARRAY_TASK_ID": id, "SLURM_ARRAY_TASK_COUNT": n, "JOB_COMPLETION_INDEX": job,
			"TRAJFLOW_SHARD_COUNT": count, "RANK": rank, "WORLD_SIZE": world} {
			if v != "" {
				e[k] = v
			}
		}
		got, err := sources.Shard{Auto: true}.Resolve(func(k string) (string, bool) { v, ok := e[k]; return v, ok })
		if err == nil && (got.Count < 1 || got.Index < 0 || got.Index >= got.Count) {
			t.Fatalf("resolved to an impossible shard %+v", got)
		}
	})
}
