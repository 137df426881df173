package config_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/config"
	_ "github.com/trajflow/trajflow/envs/builtin" // the environments whose options the tests set
	"github.com/trajflow/trajflow/inference/sim"
)

const base = "source: {path: tasks.jsonl}\n"

func TestParseErrorsNameKeyAndLine(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		sets []string
		want []string
	}{
		{"unknown section", base + "bogus: 1\n", nil, []string{"cfg.yaml: line 2: bogus: unknown key"}},
		{"unknown nested key", "source:\n  path: t.jsonl\n  limitt: 3\n", nil, []string{"line 3: source.limitt: unknown key"}},
		{"every problem at once", base + "repeat: {n: -1}\ngroups: {keep: sometimes}\n", nil,
			[]string{"repeat.n: must be >= 1, got -1", `groups.keep: "sometimes" is not one of all, nonzero_std, mean_in`}},
		{"missing path", "repeat: {n: 2}\n", nil, []string{"source.path: required"}},
		{"bad endpoint", base + "generate: {endpoints: [ftp://x]}\n", nil, []string{"generate.endpoints[0]"}},
		{"bad duration", base + "generate: {timeout: soon}\n", nil, []string{`cfg.yaml: line 2: generate.timeout: "soon" is not a duration`}},
		{"type error names the key", base + "repeat:\n  n: four\n", nil, []string{"cfg.yaml: line 3: repeat.n: want a whole number, got the text `four`"}},
		{"type error names the key among several on its line", base + "generate: {endpoints: [sim://], params: [1, 2]}\n", nil, []string{"cfg.yaml: line 2: generate.params: want a mapping, got a list"}},
		{"set of an unknown section names the flag", base, []string{"outptu.dir=x"}, []string{"--set outptu.dir=x: outptu: unknown key"}},
		{"set with an unterminated quote", base, []string{`prompt.user="Solve: {q}`},
			[]string{`--set prompt.user="Solve: {q}: the value is not valid YAML`, `--set 'prompt.user="Solve: {q}"'`}},
		{"set with an unclosed list", base, []string{"generate.endpoints=[sim://"}, []string{"--set generate.endpoints=[sim://: the value is not valid YAML"}},
		{"mean_in shape", base + "groups: {keep: mean_in, mean_in: [0.9, 0.1]}\n", nil, []string{"groups.mean_in: want [lo, hi]"}},
		{"groups order and on_exhausted", base + "groups: {order: random, on_exhausted: keep_unfiltered}\n", nil,
			[]string{`cfg.yaml: line 2: groups.order: "random" is not one of completion, task`, "cfg.yaml: line 2: groups.on_exhausted: keep_unfiltered fills up to groups.target, but no target is set"}},
		{"set unknown key", base, []string{"repeat.nn=3"}, []string{"repeat.nn: unknown key"}},
		{"set malformed", base, []string{"repeat.n"}, []string{`--set "repeat.n": want section.key=value`}},
		{"set into a scalar", base, []string{"source.path.x=1"}, []string{"source.path is not a section"}},
		{"not a mapping", "- a\n- b\n", nil, []string{"must be a mapping of sections"}},
		{"explicit n: 0", base + "repeat: {n: 0}\n", nil, []string{"cfg.yaml: line 2: repeat.n: must be >= 1, got 0"}},
		{"raw observation tokens in chat", base + "env: {observation_tokens: raw}\n", nil,
			[]string{`cfg.yaml: line 2: env.observation_tokens: raw tokenises observations without the chat template, which needs generate.api: tokens or sglang (generate.api is "chat")`}},
		{"bad observation tokens", base + "generate: {api: tokens}\nenv: {observation_tokens: text}\n", nil,
			[]string{`cfg.yaml: line 3: env.observation_tokens: must be template or raw, got "text"`}},
		{"truncation left in chat", base + "prompt: {max_tokens: 64, truncation: left}\n", nil,
			[]string{`cfg.yaml: line 2: prompt.truncation: left sends the cut token ids, which needs generate.api: tokens or sglang (generate.api is "chat"); with chat use truncation: error`}},
		{"truncation without max_tokens", base + "prompt: {truncation: right}\n", nil, []string{"cfg.yaml: line 2: prompt.truncation: needs prompt.max_tokens"}},
		{"bad truncation", base + "prompt:\n  max_tokens: 64\n  truncation: both\n", nil, []string{`cfg.yaml: line 4: prompt.truncation: "both" is not one of left, right, middle, error`}},
		{"negative max_tokens", base + "prompt: {max_tokens: -1}\n", nil, []string{"cfg.yaml: line 2: prompt.max_tokens: must be >= 0 (0: no limit), got -1"}},
		{"max_tokens with completions", base + "prompt: {max_tokens: 8}\ngenerate: {api: completions}\n", nil, []string{"prompt.max_tokens: counts the prompt with the server's chat template"}},
		{"bad output.images", base + "output: {images: external}\n", nil, []string{`cfg.yaml: line 2: output.images: "external" is not one of reference, inline`}},
		{"n: 0 by --set", base, []string{"repeat.n=0"}, []string{"--set repeat.n=0: repeat.n: must be >= 1, got 0"}},
		{"empty endpoints", base + "generate: {endpoints: []}\n", nil, []string{"cfg.yaml: line 2: generate.endpoints: empty list"}},
		{"empty endpoints by --set", base, []string{"generate.endpoints=[]"}, []string{"--set generate.endpoints=[]: generate.endpoints: empty list"}},
		{"set value read as a mapping", base, []string{"prompt.user=Compute: {question}"},
			[]string{`--set prompt.user=Compute: {question}: prompt.user: want a string, got a mapping`, `quote it inside the shell's quotes: --set 'prompt.user="Compute: {question}"'`}},
		{"set type error keeps the file's lines", base + "repeat: {seed: x}\n", []string{"repeat.n=[2]"},
			[]string{"--set repeat.n=[2]: repeat.n: want a whole number, got a list", "cfg.yaml: line 2: repeat.seed: want a whole number, got the text `x`"}},
		{"bad s3 output.dir", base + "output: {dir: \"s3://Bad_Bucket/x\"}\n", nil, []string{"cfg.yaml: line 2: output.dir:", "lower-case letters"}},
		{"bad s3 source.path", "source: {path: \"s3://bucket/a/../t.jsonl\"}\n", nil, []string{"cfg.yaml: line 1: source.path:", `".." segments`}},
		{"s3 arrow stream", base + "output: {dir: s3://bucket/x, arrow_stream: s3://bucket/x/s.arrows}\n", nil, []string{"output.arrow_stream: a local path"}},
		{"api key variable unset", base + "generate: {api_key_env: TRAJFLOW_TEST_UNSET_KEY}\n", nil, []string{"generate.api_key_env: environment variable TRAJFLOW_TEST_UNSET_KEY is not set"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tt.yaml), "cfg.yaml", tt.sets)
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestSetsAndDefaults(t *testing.T) {
	cfg, err := config.Parse([]byte(base+"env: {name: math, answer_field: ans}\n"), "cfg.yaml",
		[]string{"repeat.n=8", "generate.params.temperature=0.7", "groups.mean_in=[0.1, 0.9]", "groups.keep=mean_in", "run.progress=250ms"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Repeat.N != 8 || cfg.Generate.Params["temperature"] != 0.7 || cfg.Groups.MeanIn[1] != 0.9 {
		t.Fatalf("sets not applied: %+v", cfg)
	}
	if cfg.Run.Progress.D() != 250*time.Millisecond || cfg.Env.Options["answer_field"] != "ans" {
		t.Fatalf("progress %v options %v", cfg.Run.Progress.D(), cfg.Env.Options)
	}
	if len(cfg.Generate.Endpoints) != 1 || cfg.Generate.Endpoints[0] != "sim://" || cfg.Repeat.N != 8 || cfg.Output.Dir != "out" || cfg.Run.ID != "out" || cfg.Groups.MaxAttempts != 1 {
		t.Fatalf("defaults: %+v", cfg)
	}
}

// Left out, n is 1 and the endpoints are the simulator's; a quoted --set
// value is a string.
func TestUnsetDefaults(t *testing.T) {
	cfg, err := config.Parse([]byte(base), "cfg.yaml", []string{`prompt.user="Compute: {question}"`})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Repeat.N != 1 || len(cfg.Generate.Endpoints) != 1 || cfg.Generate.Endpoints[0] != "sim://" || cfg.Prompt.User != "Compute: {question}" {
		t.Fatalf("n %d endpoints %q user %q", cfg.Repeat.N, cfg.Generate.Endpoints, cfg.Prompt.User)
	}
}

func TestFingerprint(t *testing.T) {
	load := func(sets ...string) *config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(base), "cfg.yaml", sets)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	a, canon := load().Fingerprint()
	// Speed and place do not change what a run produces.
	// seed: 0 is a configured seed (sent), unlike a seed left out.
	if !load("repeat.seed=0").Repeat.SeedConfigured() {
		t.Error("--set repeat.seed=0: seed not configured")
	}
	if b, _ := load("repeat.seed=0").Fingerprint(); b == a {
		t.Error("repeat.seed=0 kept the fingerprint of a config without a seed")
	}
	if b, _ := load("repeat.override_row_seed=true").Fingerprint(); b == a {
		t.Error("repeat.override_row_seed kept the fingerprint")
	}
	for _, set := range []string{"generate.price.input_per_mtok=3", "generate.invalid_retries=2", "generate.concurrency=7", "output.dir=elsewhere", "generate.endpoints=[http://h:1/v1]", "env.concurrency=3", "source.task_index=line", "repeat.override_row_seed=false"} {
		if b, _ := load(set).Fingerprint(); b != a {
			t.Errorf("%s changed the fingerprint", set)
		}
	}
	// What is sampled does.
	for _, set := range []string{"repeat.n=2", "generate.params.temperature=0.5", "env.answer_field=x", "groups.keep=nonzero_std", "repeat.seed=9", "source.path=other.jsonl", "source.task_index=dedup",
		"generate.invalid_retries=0", "generate.retry_on=[length]", "output.openai_batch=true"} {
		c := load(set)
		if b, _ := c.Fingerprint(); b == a {
			t.Errorf("%s kept the fingerprint", set)
		}
		diffs, err := c.DiffSemantic(canon)
		if err != nil || len(diffs) != 1 {
			t.Fatalf("%s: diffs %v, %v", set, diffs, err)
		}
		key := strings.SplitN(set, "=", 2)[0]
		if key == "env.answer_field" {
			key = "env.options.answer_field"
		}
		if !strings.HasPrefix(diffs[0], key+":") {
			t.Errorf("%s: diff %q does not name the key", set, diffs[0])
		}
	}
}

// Options an environment declares operational (pool sizes, timeouts,
// retries) may change on resume; its other options may not.
func TestOperationalEnvOptions(t *testing.T) {
	tests := []struct {
		env         string
		operational []string
		semantic    []string
	}{
		{"env: {name: subprocess, command: [python3, env.py], workers: 2}\n",
			[]string{"env.workers=8", "env.step_timeout=5s", "env.shutdown_grace=1s"},
			[]string{"env.command=[python3, other.py]", "env.dir=/tmp"}},
		{"env: {name: http, url: http://127.0.0.1:1}\n",
			[]string{"env.request_timeout=5s", "env.max_attempts=9", "env.backoff=1s"},
			[]string{"env.protocol=nemo_gym"}},
	}
	for _, tt := range tests {
		fp := func(sets ...string) string {
			cfg, err := config.Parse([]byte(base+tt.env), "cfg.yaml", sets)
			if err != nil {
				t.Fatal(err)
			}
			h, _ := cfg.Fingerprint()
			return h
		}
		a := fp()
		for _, set := range tt.operational {
			if fp(set) != a {
				t.Errorf("%s: operational %s changed the fingerprint", tt.env, set)
			}
		}
		for _, set := range tt.semantic {
			if fp(set) == a {
				t.Errorf("%s: %s kept the fingerprint", tt.env, set)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(base), "repeat.n=3")
	f.Add([]byte("source: {path: x}\ngroups: {mean_in: [1]}\n"), "a.b.c=[")
	f.Add([]byte(":\n- {"), "=")
	f.Fuzz(func(t *testing.T, data []byte, set string) {
		cfg, err := config.Parse(data, "fuzz.yaml", []string{set})
		if err == nil && cfg.Source.Path == "" {
			t.Fatal("a config without source.path validated")
		}
	})
}

func ExampleParse() {
	_, err := config.Parse([]byte("source: {path: tasks.jsonl, limitt: 5}\n"), "run.yaml", nil)
	fmt.Println(err)
	// Output: run.yaml: line 1: source.limitt: unknown key
}

func TestSimConfigKeys(t *testing.T) {
	cfg, err := config.Parse([]byte(`
source: {path: tasks.jsonl}
generate:
  sim: {preset: agent, capacity: 64, max_model_len: 2048, turns: [2, 3], env_delay: 250ms, obs_tokens: 40}
`), "c.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	o := sim.New(sim.OptionsFrom(cfg.Generate.Sim)).Options()
	if o.Capacity != 64 || o.MaxModelLen != 2048 || o.MinTurns != 2 || o.MaxTurns != 3 || o.EnvDelay != 250*time.Millisecond || o.ObsTokens != 40 {
		t.Fatalf("options %+v", o)
	}
	for _, bad := range []string{"capacity: -1", "max_model_len: -5", "turns: [3, 2]", "turns: [1]", "env_delay: -1s", "obs_tokens: -2"} {
		_, err := config.Parse([]byte("source: {path: t.jsonl}\ngenerate:\n  sim: {"+bad+"}\n"), "c.yaml", nil)
		key := "generate.sim." + strings.SplitN(bad, ":", 2)[0]
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: err = %v, want one naming %s", bad, err, key)
		}
	}
}

// An s3:// source.path stays a URL in the fingerprint (a local path is
// made absolute).
func TestFingerprintS3Source(t *testing.T) {
	c, err := config.Parse([]byte("source: {path: \"s3://bucket/in/t.jsonl\"}\n"), "cfg.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Semantic()["source.path"]; got != `"s3://bucket/in/t.jsonl"` {
		t.Fatalf("source.path in the fingerprint = %s", got)
	}
}

// An OpenAI Batch file runs without an environment unless one is given;
// output.openai_batch keeps failed requests on resume; a tokens run cannot
// send a Batch file's bodies.
func TestOpenAIBatchConfig(t *testing.T) {
	const batch = "source: {path: b.jsonl, format: openai_batch}\n"
	cfg, err := config.Parse([]byte(batch+"output: {openai_batch: true}\n"), "cfg.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Env.Name != "none" || cfg.Run.ResumeErrors != "keep" || cfg.Generate.Structured.Retries() != 2 {
		t.Fatalf("env.name %q, run.resume_errors %q, invalid_retries %d", cfg.Env.Name, cfg.Run.ResumeErrors, cfg.Generate.Structured.Retries())
	}
	if cfg, err := config.Parse([]byte(batch+"env: {name: math}\n"), "cfg.yaml", nil); err != nil || cfg.Env.Name != "math" || cfg.Run.ResumeErrors != "redo" {
		t.Fatalf("an env given: %v, %+v", err, cfg)
	}
	if cfg, err := config.Parse([]byte(base), "cfg.yaml", nil); err != nil || cfg.Env.Name != "math" {
		t.Fatalf("a JSONL source keeps its default environment: %v", err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{batch + "output: {openai_batch: true}\nrun: {resume_errors: redo}\n", "output.openai_batch: needs run.resume_errors: keep"},
		{batch + "generate: {api: tokens}\n", "source.format: openai_batch sends each line's body"},
		{batch + "generate: {invalid_retries: -1, retry_on: [stop]}\n", "generate.retry_on[0]"},
		{batch + "generate: {price: {input_per_mtok: -1}}\n", "generate.price.input_per_mtok: must be >= 0"},
		{"source: {path: b.jsonl, format: openai}\n", "jsonl, parquet, openai_batch"},
		{batch + "generate: {params: {response_format: {type: json_schema, json_schema: {schema: {type: 5}}}}}\n", "generate.params: response_format.json_schema.schema"},
	} {
		if _, err := config.Parse([]byte(tc.yaml), "cfg.yaml", nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// run.progress: left out it is 5s; a 0 the config or --set wrote (as
// --quiet does) turns progress off.
func TestProgressZeroIsOff(t *testing.T) {
	for _, tt := range []struct {
		yaml string
		sets []string
		want time.Duration
	}{
		{"", nil, 5 * time.Second},
		{"run: {progress: 0}\n", nil, 0},
		{"run: {progress: 0s}\n", nil, 0},
		{"", []string{"run.progress=0"}, 0},
		{"run: {progress: 2s}\n", []string{"run.progress=0"}, 0},
		{"run: {id: x}\n", nil, 5 * time.Second},
	} {
		cfg, err := config.Parse([]byte(base+"env: {name: math}\n"+tt.yaml), "cfg.yaml", tt.sets)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Run.Progress.D() != tt.want {
			t.Errorf("%q %v: progress %v, want %v", tt.yaml, tt.sets, cfg.Run.Progress.D(), tt.want)
		}
	}
}

// output.jsonl_rows: left out it is kept; all is accepted; anything else
// is an error naming the key and the values.
func TestJSONLRows(t *testing.T) {
	for _, tt := range []struct{ yaml, want, err string }{
		{"output: {jsonl: true}\n", config.JSONLKept, ""},
		{"output: {jsonl: true, jsonl_rows: all}\n", config.JSONLAll, ""},
		{"output: {jsonl: true, jsonl_rows: kept}\n", config.JSONLKept, ""},
		{"output: {jsonl: true, jsonl_rows: filtered}\n", "", `output.jsonl_rows: "filtered" is not kept or all`},
	} {
		cfg, err := config.Parse([]byte(base+tt.yaml), "cfg.yaml", nil)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err %v, want %q", tt.yaml, err, tt.err)
			}
			continue
		}
		if err != nil || cfg.Output.JSONLRows != tt.want {
			t.Errorf("%s: %v, jsonl_rows %q, want %q", tt.yaml, err, cfg.Output.JSONLRows, tt.want)
		}
	}
}
