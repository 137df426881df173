package generate

import (
	"context"
	"fmt"
	"slices"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// checkGenerationPrompt makes sure the server's POST /tokenize renders a
// conversation without the generation prompt when asked to
// (add_generation_prompt: false), as the observation delta needs (a
// conversation that ends with an assistant reply, rendered without and
// with the new messages). SGLang's /tokenize renders messages through its
// chat-completions path, which always appends the generation prompt
// (python/sglang/srt/entrypoints/openai/serving_chat.py at SGLang revision
// 002897c23becbd522d88b8115a763a21765f978a: apply_chat_template with
// add_generation_prompt=True); with such a server the observations' ids
// could not be isolated, so the run stops before reading data.
// env.observation_tokens: raw needs no such rendering.
func (g *Generator) checkGenerationPrompt(ctx context.Context) error {
	if g.opts.ObservationTokens == "raw" {
		return nil
	}
	msgs := []pipeline.Message{{Role: pipeline.RoleUser, Content: "Say OK."}, {Role: pipeline.RoleAssistant, Content: "OK."}}
	render := func(gen bool) ([]int32, error) {
		return g.tok.Tokenize(ctx, &inference.TokenizeRequest{Model: g.opts.Model, Messages: msgs, AddGenerationPrompt: gen,
			TemplateArgs: inference.TemplateArgs(g.opts.Params)})
	}
	without, err := render(false)
	if err != nil {
		return fmt.Errorf("generate.api: %s: POST /tokenize: %w", g.opts.API, err)
	}
	with, err := render(true)
	if err != nil {
		return fmt.Errorf("generate.api: %s: POST /tokenize: %w", g.opts.API, err)
	}
	if slices.Equal(without, with) {
		return fmt.Errorf("generate.api: %s: the server's POST /tokenize renders a conversation the same with and without add_generation_prompt (SGLang's always appends the generation prompt), so the chat template's tokens of each observation cannot be isolated; set env.observation_tokens: raw (each observation's text tokenized alone), or use a server whose /tokenize honours add_generation_prompt (vLLM)", g.opts.API)
	}
	return nil
}
