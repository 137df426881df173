package generate_test

import (
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/generate"
)

// TestAgentCallParams: an agent's call parameters are sent, under the
// config's: the config's temperature wins, the agent's max_tokens and
// top_p stand where the config sets none.
func TestAgentCallParams(t *testing.T) {
	s := sim.New(sim.Options{Seed: 1})
	defer s.Close()
	g, err := generate.New(s, generate.Options{Model: "sim", API: inference.APIChat, Params: map[string]any{"temperature": 1.0}})
	if err != nil {
		t.Fatal(err)
	}
	r := &pipeline.Rollout{Task: &pipeline.Task{}, NoSeed: true,
		CallParams: map[string]any{"temperature": 0.2, "max_tokens": 7, "top_p": 0.9}}
	p := g.Request(r).Params
	if p["temperature"] != 1.0 || p["max_tokens"] != 7 || p["top_p"] != 0.9 {
		t.Fatalf("params %v: want the config's temperature 1 and the agent's max_tokens 7, top_p 0.9", p)
	}
}
