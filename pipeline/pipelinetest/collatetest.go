package pipelinetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// Group returns a kept group of n rollouts of task taskIndex. Each rollout
// carries about payload bytes of message text and token data, a tool call
// on odd rollouts, metrics, turn rewards and token ids. Values depend only
// on the arguments.
func Group(taskIndex int64, n, payload int) *pipeline.Group {
	task := &pipeline.Task{
		Index: taskIndex,
		Raw:   json.RawMessage(fmt.Sprintf(`{"question":"q%d","expected_answer":"%d"}`, taskIndex, taskIndex%7)),
	}
	g := &pipeline.Group{Key: pipeline.GroupKey{TaskIndex: taskIndex}, Kept: true}
	var sum float64
	for i := 0; i < n; i++ {
		r := Rollout(task, i, n, payload)
		sum += r.Reward
		g.Rollouts = append(g.Rollouts, r)
	}
	g.Mean = sum / float64(n)
	for _, r := range g.Rollouts {
		r.GroupRewardMean = g.Mean
		r.GroupRewardStd = 0.5
		r.Advantage = r.Reward - g.Mean
	}
	return g
}

// Rollout returns rollout i of a group of n for task. Its messages' spans
// (TokenStart, TokenEnd) cover the whole sequence PromptTokenIDs ++
// ResponseTokenIDs, and each message's TokenIDs and Logprobs are the
// sequence's at its span, as schema.Rollouts restores them.
func Rollout(task *pipeline.Task, i, n, payload int) *pipeline.Rollout {
	// A quarter of the payload is token data (ids and logprobs of the
	// response, 4+4+1+4 bytes per token), the rest message text.
	tokens := payload / 4 / 13
	if tokens < 8 {
		tokens = 8
	}
	text := max(payload-tokens*13, 8)
	seed := task.Index*1000 + int64(i)
	r := &pipeline.Rollout{
		RunID:        "run-test",
		Task:         task,
		Attempt:      int(task.Index % 2),
		RolloutIndex: i,
		GroupSize:    n,
		GroupID:      fmt.Sprintf("g-%d", task.Index),
		TrajID:       fmt.Sprintf("t-%d-%d", task.Index, i),
		Seed:         seed,
		Env:          "math",
		Model:        "sim-model",
		Status:       pipeline.StatusOK,
		FinishReason: "stop",
		Terminated:   true,
		NumTurns:     2,
		Reward:       float64(i % 2),
		TurnRewards:  []float64{0, float64(i % 2)},
		Metrics:      map[string]float64{"acc": float64(i % 2), "len": float64(tokens)},
		Kept:         true,

		Truncated:             i%4 == 3,
		MaxTurnsReached:       i%5 == 4,
		TokenContinuityBreaks: i % 3,

		PromptTokens:     10,
		CompletionTokens: tokens,
		EnvTokens:        3,
		GenTime:          time.Duration(seed%97) * time.Millisecond,
		EnvTime:          1500 * time.Microsecond,
		TotalTime:        time.Duration(seed%97)*time.Millisecond + 1500*time.Microsecond,
	}
	if task.Index%5 == 4 {
		r.Kept = false
		r.Status = pipeline.StatusFiltered
		r.FilterReason = "zero_std"
	}
	if i%3 == 2 {
		r.Status = pipeline.StatusError
		r.Error = "generate: http 500"
		r.ErrorClass = "server"
	}
	r.PromptTokenIDs = seq(10, int32(seed))
	half := tokens / 2
	r.ResponseTokenIDs = seq(tokens, int32(seed)+100)
	r.LossMask = make([]int8, tokens)
	r.ResponseLogprobs = make([]float32, tokens)
	for k := range tokens {
		if k < half || k >= half+3 {
			r.LossMask[k] = 1
			r.ResponseLogprobs[k] = -float32(k%17) / 8
		}
	}
	body := words(uint64(seed), text/2)
	// Spans in the sequence PromptTokenIDs ++ ResponseTokenIDs: the system
	// message holds the prompt's first 4 tokens, the user message the
	// other 6; then the first answer, the 3 observation tokens (mask 0)
	// and the second answer.
	p := int32(len(r.PromptTokenIDs))
	h := p + int32(half)
	r.Messages = []pipeline.Message{
		{Role: pipeline.RoleSystem, Content: "You are a careful solver.",
			TokenIDs: r.PromptTokenIDs[:4:4], TokenStart: 0, TokenEnd: 4},
		{Role: pipeline.RoleUser, Content: fmt.Sprintf("Solve problem %d.", task.Index),
			TokenIDs: r.PromptTokenIDs[4:], TokenStart: 4, TokenEnd: p},
		{Role: pipeline.RoleAssistant, Content: body, Turn: 1,
			TokenIDs: r.ResponseTokenIDs[:half:half], Logprobs: r.ResponseLogprobs[:half:half], TokenStart: p, TokenEnd: h},
		{Role: pipeline.RoleUser, Content: "Try again.", Turn: 1,
			TokenIDs: r.ResponseTokenIDs[half : half+3 : half+3], TokenStart: h, TokenEnd: h + 3},
		{Role: pipeline.RoleAssistant, Content: body, Turn: 2,
			TokenIDs: r.ResponseTokenIDs[half+3:], Logprobs: r.ResponseLogprobs[half+3:], TokenStart: h + 3, TokenEnd: p + int32(tokens)},
	}
	// Policy versions: the first answer under version 1, the second
	// under a version between 1 and 2 (a weight update while in flight);
	// sampling parameters on every other rollout (null on the rest).
	r.AdmittedVersion = 1
	r.PolicyVersions = []pipeline.VersionSpan{
		{Version: 1, VersionMax: 1, Start: p, End: h},
		{Version: 1, VersionMax: 2, Start: h + 3, End: p + int32(tokens)},
	}
	// Segments: every fourth rollout is an agent's that rewrote its
	// history once, its second segment starting at message 3 (the
	// observation after the first answer) and its second answer.
	if i%4 == 1 {
		r.Segments = []pipeline.Segment{{Message: 3, Token: h, Turn: 2}}
	}
	// Routes: every third rollout's engine routed it (2 layers, top 2)
	// but its last token and the second observation token (null
	// routes on the rest).
	if i%3 == 0 {
		n := int(p) + tokens
		rt := &pipeline.Routes{Layers: 2, TopK: 2, Experts: make([]int16, 0, n*4)}
		for q := range n {
			for k := range int16(4) {
				e := int16((q*7+i)%64) + k
				if q == int(h)+1 || q == n-1 {
					e = pipeline.NotRouted
				}
				rt.Experts = append(rt.Experts, e)
			}
		}
		r.Routes = rt
	}
	if i%2 == 0 {
		temp, topP, topK, maxTok := 0.7+float64(i)/100, 0.95, int32(20+i), int32(tokens)
		r.Sampling = pipeline.Sampling{Temperature: &temp, TopP: &topP, TopK: &topK, MaxTokens: &maxTok}
	}
	if i%2 == 1 {
		r.ToolCalls = 1
		r.Messages[2].ToolCalls = []pipeline.ToolCall{{
			ID: fmt.Sprintf("call_%d", i), Type: "function", Name: "calc",
			Arguments: fmt.Sprintf(`{"expr":"%d+%d"}`, i, task.Index),
		}}
		r.Messages[3] = pipeline.Message{Role: pipeline.RoleTool, Content: "42", ToolCallID: fmt.Sprintf("call_%d", i),
			Name: "calc", Turn: 1, TokenIDs: r.ResponseTokenIDs[half : half+3 : half+3], TokenStart: h, TokenEnd: h + 3}
	}
	if i%3 == 2 { // a prompt with an image
		u := r.Messages[1]
		u.Parts = []pipeline.ContentPart{{Type: pipeline.PartText, Text: u.Content},
			{Type: pipeline.PartImage, ImageURL: fmt.Sprintf("https://img.example/%d.png", i)}}
		r.Messages[1] = u
		r.PromptTokensDropped = i
		r.InvalidActions = i % 2
	}
	return r
}

var vocabulary = strings.Fields(`the a of to and is in that we x y z let then so
	answer equals compute sum product check step first next because therefore value
	function call result error retry prime factor root square integer fraction 0 1 2
	3 4 5 6 7 8 9 + - * / = ( ) solve verify case proof assume contradiction hence`)

// words returns n bytes of pseudo-random text drawn from a small
// vocabulary, a stand-in for model output that compresses like prose.
func words(state uint64, n int) string {
	var sb strings.Builder
	sb.Grow(n + 16)
	for sb.Len() < n {
		state = state*6364136223846793005 + 1442695040888963407
		sb.WriteString(vocabulary[(state>>33)%uint64(len(vocabulary))])
		sb.WriteByte(' ')
	}
	return sb.String()[:n]
}

func seq(n int, start int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = start + int32(i)
	}
	return out
}
