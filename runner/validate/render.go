package validate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/generate"
)

// maxRenderedShown bounds the bytes of a rendered prompt validate shows.
const maxRenderedShown = 4000

// renderedPrompt writes, in generate.api tokens or when generate.params
// (or the row) holds template parameters (chat_template_kwargs, ...), r's
// first prompt as the server's template renders it with them: its length
// in tokens and its text (POST /detokenize; newlines as \n, clipped). A
// failed render is a problem: the run would fail the row the same way.
func (v *validation) renderedPrompt(ctx context.Context, gen *generate.Generator, r *pipeline.Rollout) {
	if gen == nil {
		return
	}
	p, err := gen.RenderedPrompt(ctx, r)
	switch {
	case err != nil:
		if v.cfg.Generate.API.Tokens() {
			v.problem(fmt.Errorf("generate.api: %s: %s: POST /tokenize of the first prompt: %w", v.cfg.Generate.API, r.Task.Source, err))
		}
		return
	case p == nil || !v.cfg.Generate.API.Tokens() && p.TemplateArgs == nil:
		return
	}
	with := ""
	if p.TemplateArgs != nil {
		b, _ := json.Marshal(p.TemplateArgs)
		with = ", with " + string(b)
	}
	if p.TextErr != nil {
		fmt.Fprintf(v.out, "  first prompt rendered%s: %d tokens (no text: POST /detokenize: %v)\n", with, len(p.IDs), p.TextErr)
		return
	}
	text := p.Text
	more := ""
	if len(text) > maxRenderedShown {
		cut := maxRenderedShown
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		more = fmt.Sprintf(" … (%d more bytes)", len(text)-cut)
		text = text[:cut]
	}
	text = strings.ReplaceAll(text, "\n", `\n`)
	fmt.Fprintf(v.out, "  first prompt rendered%s: %d tokens: %s%s\n", with, len(p.IDs), text, more)
}
