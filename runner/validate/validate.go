package validate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner/build"
	"github.com/trajflow/trajflow/sources"
	"github.com/trajflow/trajflow/stages/envstep"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/template"
	"github.com/trajflow/trajflow/storage"
)

// DefaultRows is how many rows Run renders by default.
const DefaultRows = 3

// Options are Run's settings.
type Options struct {
	// Build are the build steps' options: Client and Env replace the
	// config's endpoints and environment as they do for a run. Run walks
	// the steps dry (build.Options.Dry).
	Build build.Options
	// Rows is how many rows to render and reset the environment on
	// (DefaultRows when 0; a negative value: none, the environment is
	// only started and closed).
	Rows int
	// Out receives the report: the rendered requests, the endpoints and
	// the environment checked; nil discards it.
	Out io.Writer
	// Send sends each rendered row's first request to the endpoints, as
	// the run's first turn would (one generation per row), and reports
	// the answer: a request the server refuses (a prompt and max_tokens
	// over its context, a parameter it does not take) is a problem.
	Send bool
}

// Run is runner.Validate: it walks the build steps dry, reporting each
// one's problems and going on, renders the first rows through the
// components built, and with Send sends each row's first request.
func Run(ctx context.Context, cfg *config.Config, opts Options) error {
	v := &validation{cfg: cfg, opts: opts}
	if opts.Rows == 0 {
		v.opts.Rows = DefaultRows
	}
	var skipped []string
	bopts := opts.Build
	bopts.Dry = true
	c := build.New(cfg, bopts, build.Hooks{
		Output: func(ctx context.Context) error { v.storage(ctx); return nil },
		OnReject: func(r sources.Reject) error {
			skipped = append(skipped, r.Where+": "+r.Reason)
			return nil
		},
		OnEnvStart: func(route string, err error) {
			if err != nil {
				fmt.Fprintf(v.out, "env %s: could not start\n", route)
				return
			}
			fmt.Fprintf(v.out, "env %s: started\n", route)
		},
	})
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	v.out = c.Red.Writer(out)
	_ = c.Walk(ctx, v.visit(c)) // every problem is recorded; the walk goes on
	v.render(ctx, c)
	for _, s := range skipped {
		fmt.Fprintf(v.out, "row skipped (source.on_bad_row: skip): %s\n", s)
	}
	// Closing stops the environments' workers: a failure is a problem.
	for _, err := range pipeline.Unjoin(c.Close()) {
		v.problem(err)
	}

	if len(v.problems) == 0 {
		fmt.Fprintln(v.out, "ok: a run would start")
		return nil
	}
	fmt.Fprintf(v.out, "%d problem(s)\n", len(v.problems))
	return &config.ValidationError{Problems: v.problems}
}

// validation is one Run call's state.
type validation struct {
	cfg  *config.Config
	opts Options
	out  io.Writer
	// bad holds the config's sections (run, source, prompt, ...) that
	// Check found wrong: the checks that need them are skipped.
	bad      map[string]bool
	problems []error
	// failing counts the rendered rows the run would fail before they
	// generate a token (prompt_too_long, context_length).
	failing int
	// noClient is set when the client or the generate stage cannot be
	// built (the requests are rendered without it); noRows when the rows
	// cannot be rendered.
	noClient, noRows bool
}

// visit is Validate's visit of each build step: it runs the step unless a
// section it needs is wrong or an earlier step it needs failed, reports
// what it checked, and records the step's problems; the walk goes on.
func (v *validation) visit(c *build.Components) func(s build.Step, do func() error) error {
	return func(s build.Step, do func() error) error {
		switch s.Name {
		case "config":
			if err := do(); err != nil {
				v.bad = badSections(err)
				var ve *config.ValidationError
				if errors.As(err, &ve) {
					v.problems = append(v.problems, ve.Problems...)
				} else {
					v.problems = append(v.problems, err)
				}
				fmt.Fprintf(v.out, "config: %d problem(s)\n", len(v.problems))
			} else {
				fmt.Fprintln(v.out, "config: ok")
			}
		case "client", "preflight", "batch", "decorate", "generator":
			if v.noClient {
				return nil
			}
			if v.skip("generate") {
				fmt.Fprintln(v.out, "endpoints: not checked (the generate section is wrong)")
				v.noClient = true
				return nil
			}
			err := do()
			if err != nil {
				v.noClient = true
				if s.Name == "preflight" {
					v.preflightFailed(err)
					return nil
				}
				v.problem(err)
				return nil
			}
			v.checked(s.Name, c)
		case "envs":
			v.startEnvs(c, do)
		case "template", "source", "expander":
			if v.opts.Rows < 0 || v.noRows {
				return nil
			}
			if v.skip("source", "prompt", "repeat") {
				fmt.Fprintln(v.out, "rows: not rendered (the source, prompt or repeat section is wrong)")
				v.noRows = true
				return nil
			}
			if err := do(); err != nil {
				v.problem(err)
				v.noRows = true
			}
		default:
			if err := do(); err != nil {
				v.problem(err)
			}
		}
		return nil
	}
}

// preflightFailed reports the endpoints that failed openai.Preflight,
// each on its own line naming its key.
func (v *validation) preflightFailed(err error) {
	n := 0
	for _, e := range pipeline.Unjoin(err) {
		if !errors.Is(e, openai.ErrPreflight) {
			v.problem(e)
			n++
		}
	}
	if n == 0 {
		v.problem(err)
	}
	fmt.Fprintf(v.out, "endpoints: %d of %d failed the check\n", n, len(v.cfg.Generate.Endpoints))
}

// checked reports what a step of the client checked: the endpoints once
// the Batch API (the last of their checks) answered, the token-id
// prompt once the generate stage's check passed.
func (v *validation) checked(step string, c *build.Components) {
	cfg := v.cfg
	switch step {
	case "batch":
		switch {
		case v.opts.Build.Client != nil:
			fmt.Fprintln(v.out, "endpoints: the embedder's client (not checked)")
		case !c.HTTPEndpoints():
			fmt.Fprintln(v.out, "endpoints: sim:// (the built-in simulator)")
		default:
			if cfg.Generate.API.Batch() {
				fmt.Fprintln(v.out, "endpoints: the Batch API answers (GET /v1/batches)")
			}
			fmt.Fprintf(v.out, "endpoints: %d ok (reachable, key accepted, model %q served)\n", len(cfg.Generate.Endpoints), cfg.Generate.Model)
		}
	case "generator":
		if cfg.Generate.API.Tokens() {
			fmt.Fprintln(v.out, "endpoints: generate.api tokens: /tokenize and a token-id prompt ok")
		}
	}
}

// problem records a problem; its text starts with the config key it is
// about ("generate.endpoints[0]: ..."), which locates it in the file.
func (v *validation) problem(err error) {
	v.problems = append(v.problems, v.cfg.Locate(err).(*config.ValidationError).Problems...)
}

// badSections are the top-level config sections named by the problems of
// Check's error.
func badSections(err error) map[string]bool {
	bad := map[string]bool{}
	for _, e := range pipeline.Unjoin(err) {
		key := ""
		var ke *pipeline.KeyError
		if errors.As(e, &ke) {
			key = ke.Key
		} else if inner := errors.Unwrap(e); inner != nil {
			if k, _, ok := strings.Cut(inner.Error(), ": "); ok && !strings.ContainsAny(k, " \t\n") {
				key = k
			}
		}
		if key == "" {
			bad["*"] = true // unplaced: could be anything
			continue
		}
		if i := strings.IndexAny(key, ".["); i > 0 {
			key = key[:i]
		}
		bad[key] = true
	}
	return bad
}

// skip reports whether a check needing these sections must be skipped.
func (v *validation) skip(sections ...string) bool {
	if v.bad["*"] {
		return true
	}
	for _, s := range sections {
		if v.bad[s] {
			return true
		}
	}
	return false
}

// startEnvs runs the envs step (do): it starts the environment, or each
// route's, and builds the Stepper that resets rows on them (c.Stepper
// stays nil when one cannot be started).
func (v *validation) startEnvs(c *build.Components, do func() error) {
	cfg := v.cfg
	if v.opts.Build.Env != nil {
		fmt.Fprintf(v.out, "env %s: the embedder's environment\n", cfg.Env.Name)
	} else if v.skip("env") {
		fmt.Fprintf(v.out, "env %s: not started\n", envLabel(cfg))
		return
	}
	if err := do(); err != nil {
		v.problem(err)
		c.Stepper = nil
	}
}

// render reads the first rows and writes each one's first request (and
// with Send, sends it).
func (v *validation) render(ctx context.Context, b *build.Components) {
	cfg := v.cfg
	if v.opts.Rows < 0 || v.noRows {
		return
	}
	tmpl, src, step := b.Template, b.Source, b.Stepper
	rows := 0
	// Under generate.priority a run's requests carry their group's
	// admission order (groups.Controller.Priority): a fresh run admits the
	// rows read in turn, the first as 1, and so does validate.
	admitted := map[int64]int{}
	if b.Generator != nil && cfg.Generate.PriorityOn() {
		b.Generator.SetPriority(func(r *pipeline.Rollout) (int, bool) {
			if r.Task == nil {
				return 0, false
			}
			p, ok := admitted[r.Task.Index]
			return p, ok
		})
	}
	resets := 0
	for rows < v.opts.Rows {
		t, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			v.problem(fmt.Errorf("source: %w", err))
			break
		}
		rows++
		admitted[t.Index] = rows
		if t.Invalid != "" {
			// A run makes it an error row and goes on.
			fmt.Fprintf(v.out, "row %d (%s): not sent, an error row (%s): %s\n", t.Index, t.Source, generate.ClassInvalidRequest, t.Invalid)
			continue
		}
		if err := cfg.Env.RouteTask(t); err != nil {
			v.problem(err)
			continue
		}
		if agentRow(cfg, step, t) {
			// An agent writes its own prompts and makes its own calls:
			// the row goes to it whole, on stdin.
			fmt.Fprintf(v.out, "row %d (%s): goes to the agent (env %s), which writes its own prompts: nothing rendered\n", t.Index, t.Source, envLabel(cfg))
			continue
		}
		if tmpl.Enabled() || len(t.Messages) == 0 {
			if err := tmpl.Render(t); err != nil {
				var fe *template.FieldError
				if errors.As(err, &fe) {
					// Located at the template's key.
					err = fmt.Errorf("%s: %s: row has no field %q", fe.Key, fe.Row, fe.Field)
				} else {
					err = fmt.Errorf("prompt: %w", err)
				}
				v.problem(err)
				continue
			}
		}
		r := b.Expander.Expand(t, 0)[0]
		if step != nil {
			resets++
			if err := step.Reset(ctx, r); err != nil {
				v.problem(err)
				return
			}
			if r.Status == pipeline.StatusError {
				v.problem(fmt.Errorf("env: %s: %s", t.Source, r.Error))
				continue
			}
		}
		if err := v.request(ctx, b, r); err != nil {
			v.problem(err)
			return
		}
	}
	if v.failing > 0 && v.failing == rows {
		v.problem(fmt.Errorf("every row rendered (%d) would fail before generating a token (%s or %s above): the run would generate nothing", rows, generate.ClassPromptTooLong, inference.ClassContextLength))
	}
	if rows == 0 {
		fmt.Fprintln(v.out, "rows: none selected")
	}
	if resets > 0 {
		fmt.Fprintf(v.out, "env %s: reset on %d row(s)\n", envLabel(cfg), resets)
	}
}

// agentRow reports whether t's rollouts go to an agent (envs.Agent), which
// writes its own prompts: by the environment built, or, when it could not
// be, by the name the config gives t's route.
func agentRow(cfg *config.Config, step *envstep.Stepper, t *pipeline.Task) bool {
	if step != nil {
		return step.AgentRoute(t.Env)
	}
	for _, rs := range cfg.Env.RouteSpecs() {
		if (!cfg.Env.Routed() || rs.Route == t.Env) && rs.Config.Name == "agent" {
			return true
		}
	}
	return false
}

// request writes r's first request as the generate stage builds it
// (generate.Generator.NextRequest: in tokens mode with the prompt's
// token ids, max_tokens capped to the room max_seq_len leaves) and, with
// Send, sends it. Without a generator (the endpoints were not set up) it
// writes the messages and the parameters as the generate stage merges
// them. The error is non-nil only when ctx is done.
func (v *validation) request(ctx context.Context, b *build.Components, r *pipeline.Rollout) error {
	gen := b.Generator
	if gen == nil {
		// The parameters as the generate stage merges them.
		p := inference.MergeParams(r.Task.Params, v.cfg.Generate.Params)
		if !r.NoSeed {
			p["seed"] = r.Seed
		}
		v.writeRequest(r, &inference.Request{Model: v.cfg.Generate.Model, Messages: r.Messages, Params: p, Tools: r.Tools})
		return nil
	}
	req, ok, err := gen.NextRequest(ctx, r)
	if err != nil {
		return err
	}
	if !ok {
		v.writeRequest(r, gen.Request(r))
		if !v.promptLength(ctx, gen, r) && r.Status == pipeline.StatusError {
			v.failing++
		}
		why := r.Error
		if r.Status != pipeline.StatusError {
			why = "the sequence is full (max_seq_len)"
		}
		fmt.Fprintf(v.out, "  not sent: the run resolves the row %s before its first request: %s\n", r.Status, why)
		return nil
	}
	v.writeRequest(r, req)
	v.renderedPrompt(ctx, gen, r)
	if v.promptLength(ctx, gen, r) {
		return nil // the server would refuse it: not sent
	}
	if !v.opts.Send {
		return nil
	}
	resp, err := b.Client.Complete(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		v.problem(fmt.Errorf("generate.endpoints: %s: the first request: %w", r.Task.Source, err))
		return nil
	}
	fmt.Fprintf(v.out, "  sent: %d completion tokens, finish_reason %s\n", resp.CompletionTokens, resp.FinishReason)
	return nil
}

// promptLength writes the length of r's first prompt in the server's
// tokens and what the run does with it, where that matters: under
// prompt.max_tokens it sends it, cuts it (prompt.truncation left, right or
// middle) or fails the row (error, prompt_too_long); a prompt that leaves
// no room under max_seq_len fails the row (prompt_too_long); a prompt plus
// max_tokens over the server's context (max_model_len, as /tokenize
// reports it) is refused by the server (context_length). Later turns'
// prompts are longer (the chat, or the step-wise history) and are not
// counted here. A failed count under prompt.max_tokens is a problem: the
// run would fail the row the same way. It returns whether the row would
// fail before generating a token.
func (v *validation) promptLength(ctx context.Context, gen *generate.Generator, r *pipeline.Rollout) (fails bool) {
	if gen == nil {
		return false
	}
	defer func() {
		if fails {
			v.failing++
		}
	}()
	limit := v.cfg.Prompt.MaxTokens
	n, err := gen.PromptTokens(ctx, r)
	if err != nil {
		if limit > 0 {
			v.problem(fmt.Errorf("prompt.max_tokens: %s: POST /tokenize of the first prompt: %w", r.Task.Source, err))
		}
		return false // without /tokenize, nothing to predict
	}
	if limit > 0 {
		switch {
		case n <= limit:
			fmt.Fprintf(v.out, "  first prompt: %d tokens, within prompt.max_tokens %d\n", n, limit)
		case v.cfg.Prompt.Truncation == "error":
			fmt.Fprintf(v.out, "  first prompt: %d tokens, over prompt.max_tokens %d: the row would fail (prompt.truncation: error, %s)\n", n, limit, generate.ClassPromptTooLong)
			return true
		default:
			fmt.Fprintf(v.out, "  first prompt: %d tokens, over prompt.max_tokens %d: %d cut (prompt.truncation: %s)\n", n, limit, n-limit, v.cfg.Prompt.Truncation)
			n = limit
		}
	}
	if msl := gen.MaxSeqLen(r); msl > 0 && n >= msl {
		fmt.Fprintf(v.out, "  first prompt: %d tokens, max_seq_len %d leaves no room to generate: the row would fail (%s)\n", n, msl, generate.ClassPromptTooLong)
		return true
	}
	if mml := gen.MaxModelLen(); mml > 0 {
		maxTokens := gen.MaxTokens(r, n)
		if n >= mml || maxTokens > 0 && n+maxTokens > mml {
			fmt.Fprintf(v.out, "  first prompt: %d tokens + max_tokens %d is over the server's context (max_model_len %d): the server would refuse it, the row would fail (%s)\n", n, maxTokens, mml, inference.ClassContextLength)
			return true
		}
	}
	return false
}

// writeRequest writes r's first request compactly: one line per message,
// then the tools and the parameters.
func (v *validation) writeRequest(r *pipeline.Rollout, req *inference.Request) {
	seed := fmt.Sprintf("seed %d", r.Seed)
	if r.NoSeed {
		seed = "no seed sent"
	}
	fmt.Fprintf(v.out, "row %d (%s), rollout 0 of %d, %s:\n", r.Task.Index, r.Task.Source, r.GroupSize, seed)
	for _, m := range req.Messages {
		content := strings.ReplaceAll(m.Content, "\n", `\n`)
		fmt.Fprintf(v.out, "  %s: %s\n", m.Role, content)
		for _, c := range m.ToolCalls {
			fmt.Fprintf(v.out, "    tool call %s(%s)\n", c.Name, c.Arguments)
		}
	}
	if len(req.Tools) > 0 {
		fmt.Fprintf(v.out, "  tools: %s\n", strings.Join(toolNames(req.Tools), ", "))
	}
	if req.PromptTokenIDs != nil {
		fmt.Fprintf(v.out, "  sent as %d prompt token ids (generate.api: %s)\n", len(req.PromptTokenIDs), v.cfg.Generate.API)
	}
	params, _ := json.Marshal(config.RedactValue([]string{"generate", "params"}, map[string]any(req.Params)))
	fmt.Fprintf(v.out, "  model %s, params %s\n", req.Model, params)
}

// toolNames names OpenAI tool definitions.
func toolNames(tools []json.RawMessage) []string {
	names := make([]string, 0, len(tools))
	for _, raw := range tools {
		var t struct {
			Name     string `json:"name"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		_ = json.Unmarshal(raw, &t)
		switch {
		case t.Function.Name != "":
			names = append(names, t.Function.Name)
		case t.Name != "":
			names = append(names, t.Name)
		default:
			names = append(names, "?")
		}
	}
	return names
}

// envLabel names the run's environment, or its routes, for the report.
func envLabel(cfg *config.Config) string {
	if !cfg.Env.Routed() {
		return cfg.Env.Name
	}
	var names []string
	for _, rs := range cfg.Env.RouteSpecs() {
		names = append(names, rs.Route)
	}
	return strings.Join(names, ", ")
}

// storage checks that an s3:// output.dir's bucket exists and the
// credentials may list it.
func (v *validation) storage(ctx context.Context) {
	dir := v.cfg.Output.Dir
	if v.skip("output") {
		return
	}
	if !storage.IsURL(dir) {
		if err := writable(dir); err != nil {
			v.problem(fmt.Errorf("output.dir: %s: a run could not write there: %w", dir, err))
		}
		return
	}
	u, err := storage.ParseURL(dir)
	if err != nil {
		return // Check reported it
	}
	s, err := build.OpenStore("output.dir", dir)
	if err == nil {
		if err = s.Check(ctx, u.Bucket); err != nil {
			err = build.StoreError("output.dir", dir, err)
		}
	}
	if err != nil {
		v.problem(err)
		return
	}
	fmt.Fprintf(v.out, "output.dir: bucket %s reachable\n", u.Bucket)
}
