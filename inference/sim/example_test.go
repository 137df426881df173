package sim_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
)

// The simulator in-process: time scale 0 answers at once.
func ExampleServer_Complete() {
	s := sim.New(sim.Options{Seed: 1, Accuracy: 1})
	defer s.Close()
	resp, err := s.Complete(context.Background(), &inference.Request{
		Messages: []pipeline.Message{{Role: "user", Content: "What is 12 + 7 * 3?"}},
		Params:   map[string]any{"seed": 0},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	content := resp.Message.Content
	fmt.Println(content[strings.LastIndex(content, "The answer"):])
	fmt.Println(resp.FinishReason, len(resp.Message.TokenIDs) == resp.CompletionTokens)
	// Output:
	// The answer is \boxed{33}
	// stop true
}

// Tokenize is lossless; Detokenize inverts it.
func ExampleTokenize() {
	ids := sim.Tokenize("The answer is \\boxed{42}")
	fmt.Println(len(ids), sim.Detokenize(ids, false))
	// Output:
	// 9 The answer is \boxed{42}
}
