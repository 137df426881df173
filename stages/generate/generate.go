package generate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// Options configure a Generator.
type Options struct {
	// Model is sent with every request.
	Model string
	// Params are the config's generate.params, merged over each row's own.
	Params map[string]any
	// API is generate.api: chat (the default), completions or tokens. With
	// tokens the Generator holds each trajectory's token sequence and
	// sends it as a token-id prompt; the client must be an
	// inference.Tokenizer.
	API inference.API
	// MaxSeqLenOf bounds each trajectory's token sequence (prompt and
	// response): its environment route's max_seq_len
	// (envstep.Config.SeqLenOf; SeqLen for one bound); nil or 0: no bound.
	MaxSeqLenOf func(r *pipeline.Rollout) int
	// PromptMaxTokens limits the first prompt's token ids (POST /tokenize
	// of the rendered prompt, generation prompt and tools included) to
	// this many; 0: no limit. The client must be an inference.Tokenizer.
	PromptMaxTokens int
	// PromptTruncation is what a longer prompt becomes: "left" keeps its
	// last PromptMaxTokens ids, "right" its first, "middle" its first
	// PromptMaxTokens/2 and its last PromptMaxTokens-PromptMaxTokens/2
	// (verl's data.truncation); these three need API tokens. "error" (or
	// "") fails the rollout with ClassPromptTooLong.
	PromptTruncation string
	// StepPrompt, when set, builds step-wise requests: for a rollout it
	// returns the messages of its next request and true (its route has
	// env.history_length), or false for the whole chat. A step-wise
	// request is built fresh each turn; its prompt's token ids and the
	// response's are recorded in the rollout's Steps, and the rollout's
	// own token view (PromptTokenIDs, ResponseTokenIDs, ...) stays empty:
	// no single token sequence holds a step-wise trajectory.
	StepPrompt func(r *pipeline.Rollout) ([]pipeline.Message, bool)
	// RecordSteps keeps, in whole-chat mode, each turn's prompt and
	// response token ids in the rollout's Steps (output.steps).
	RecordSteps bool
	// ObservationTokens is env.observation_tokens: "template" (or "")
	// renders the messages after a reply with the server's chat template
	// (inference.ObservationDelta); "raw" tokenises each one's text alone
	// (POST /tokenize {"prompt"}), as NeMo RL does. raw needs API tokens.
	ObservationTokens string
	// Policy, when set, is the fleet's policy version and pause: a
	// request waits while the fleet is paused, its tokens are tagged with
	// the version current when it was sent (a range when the version
	// changed while it was in flight), and a pause in abort mode cuts it
	// short (see SCHEMA.md, Policy versions). nil: version 0, never
	// paused.
	Policy *Policy
	// AbortGrace is how long an answer is awaited after the servers
	// acknowledged an abort before the request is cancelled client side;
	// 0: DefaultAbortGrace.
	AbortGrace time.Duration
	// RoutedExperts asks each token-id request for the experts the
	// engine routed its positions to (generate.routed_experts), and lays
	// each answer's routes over the rollout's (pipeline.Rollout.Routes):
	// a position keeps its first routing; observations no later prompt
	// carried, and the last generated token, stay not routed.
	// RoutedExpertsLayers is generate.routed_experts_layers. Step-wise
	// trajectories record none (they have no single token sequence).
	RoutedExperts       bool
	RoutedExpertsLayers int
}

// ClassImageUnsupported is the error class of a rollout whose messages
// hold an image under generate.api tokens or completions, which send
// no image parts.
const ClassImageUnsupported = "image_unsupported"

// firstImage is the index of the first message holding an image; -1 when
// none does.
func firstImage(msgs []pipeline.Message) int {
	for i := range msgs {
		if msgs[i].HasImages() {
			return i
		}
	}
	return -1
}

// ClassPromptTooLong is the error class of a rollout whose first prompt
// is longer than Options.PromptMaxTokens with truncation error, or leaves
// no room to generate under max_seq_len.
const ClassPromptTooLong = "prompt_too_long"

// ClassInvalidRequest is the error class of a row whose request cannot be
// sent (pipeline.Task.Invalid: an OpenAI Batch line with an unsupported
// url, or stream: true). No request is sent.
const ClassInvalidRequest = "invalid_request"

// FinishContextLength is the finish reason of a trajectory that ended
// because the server refused a later turn's prompt as longer than its
// context (the row keeps its earlier turns and the refusal in its error).
const FinishContextLength = "context_length"

// maxSeqLen is r's token bound; 0: none.
func (g *Generator) maxSeqLen(r *pipeline.Rollout) int {
	if g.opts.MaxSeqLenOf != nil {
		return g.opts.MaxSeqLenOf(r)
	}
	return 0
}

// SeqLen is Options.MaxSeqLenOf of one bound n for every trajectory; nil
// for 0 (no bound).
func SeqLen(n int) func(*pipeline.Rollout) int {
	if n == 0 {
		return nil
	}
	return func(*pipeline.Rollout) int { return n }
}

// Generator runs model turns and keeps each trajectory's token view:
// PromptTokenIDs ++ ResponseTokenIDs, LossMask, ResponseLogprobs and every
// message's span in that sequence.
type Generator struct {
	client inference.Client
	// tok renders observations; nil when the client cannot tokenize.
	tok  inference.Tokenizer
	opts Options

	mu sync.Mutex
	// without is the rendering of the fixed delta conversation without
	// tool calls, and closing what the template writes after an assistant
	// message's content; each computed once per set of template
	// arguments (templateKey).
	without map[string][]int32
	closing map[string][]int32
	// noTokenize is set once the server answered that it has no
	// /tokenize (chat mode goes on without it).
	noTokenize bool

	reqs   requestCounts
	policy policyState

	// priority gives each request its scheduling priority (SetPriority);
	// nil: none.
	priority atomic.Pointer[func(r *pipeline.Rollout) (int, bool)]
}

// SetPriority sets the function that gives each request its scheduling
// priority (inference.Request.Priority; lower first) from its rollout, or
// false for none; nil sends none. The run sets its group controller's
// (groups.Controller.Priority) under generate.priority: auto.
func (g *Generator) SetPriority(f func(r *pipeline.Rollout) (int, bool)) {
	if f == nil {
		g.priority.Store(nil)
		return
	}
	g.priority.Store(&f)
}

// New returns a Generator sending requests to client. With opts.API
// tokens the client must implement inference.Tokenizer.
func New(client inference.Client, opts Options) (*Generator, error) {
	g := &Generator{client: client, opts: opts}
	g.tok, _ = client.(inference.Tokenizer)
	if g.tokens() && g.tok == nil {
		return nil, fmt.Errorf("generate.api: %s needs a backend that tokenizes (POST /tokenize); %T cannot: use generate.api: chat", opts.API, client)
	}
	switch opts.ObservationTokens {
	case "", "template":
	case "raw":
		if !g.tokens() {
			return nil, errors.New("env.observation_tokens: raw needs generate.api: tokens or sglang (in chat mode the server renders every observation with its template)")
		}
	default:
		return nil, fmt.Errorf("env.observation_tokens: %q is not one of template, raw", opts.ObservationTokens)
	}
	if opts.PromptMaxTokens > 0 {
		if g.tok == nil {
			return nil, fmt.Errorf("prompt.max_tokens needs a backend that tokenizes (POST /tokenize); %T cannot", client)
		}
		switch opts.PromptTruncation {
		case "", "error":
		case "left", "right", "middle":
			if !g.tokens() {
				return nil, fmt.Errorf("prompt.truncation: %s needs generate.api: tokens or sglang", opts.PromptTruncation)
			}
		default:
			return nil, fmt.Errorf("prompt.truncation: %q is not one of left, right, middle, error", opts.PromptTruncation)
		}
	}
	return g, nil
}

func (g *Generator) tokens() bool { return g.opts.API.Tokens() }

// Check makes sure the server can do what the configured API needs: with
// tokens, it tokenizes a one-message conversation and generates one token
// from it as a token-id prompt. It returns an error that says what is
// missing and to use generate.api: chat.
func (g *Generator) Check(ctx context.Context) error {
	if !g.tokens() {
		if g.opts.PromptMaxTokens > 0 {
			ids, err := g.tok.Tokenize(ctx, &inference.TokenizeRequest{
				Model: g.opts.Model, Messages: []pipeline.Message{{Role: pipeline.RoleUser, Content: "Say OK."}}, AddGenerationPrompt: true,
				TemplateArgs: inference.TemplateArgs(g.opts.Params),
			})
			if err == nil && len(ids) == 0 {
				err = errors.New("it returned no tokens")
			}
			if err != nil {
				return fmt.Errorf("prompt.max_tokens counts the prompt with POST /tokenize: %w", err)
			}
		}
		return nil
	}
	ids, err := g.tok.Tokenize(ctx, &inference.TokenizeRequest{
		Model: g.opts.Model, Messages: []pipeline.Message{{Role: pipeline.RoleUser, Content: "Say OK."}}, AddGenerationPrompt: true,
		TemplateArgs: inference.TemplateArgs(g.opts.Params),
	})
	api, where := g.opts.API, g.opts.API.TokenPrompts()
	if err != nil {
		return fmt.Errorf("generate.api: %s: POST /tokenize: %w", api, err)
	}
	if len(ids) == 0 {
		return fmt.Errorf("generate.api: %s: POST /tokenize returned no tokens; use generate.api: chat", api)
	}
	resp, err := g.client.Complete(ctx, &inference.Request{Model: g.opts.Model, PromptTokenIDs: ids, Params: map[string]any{"max_tokens": 1}})
	if err != nil {
		return fmt.Errorf("generate.api: %s: a token-id prompt on %s: %w", api, where, err)
	}
	if len(resp.Message.TokenIDs) == 0 && resp.CompletionTokens > 0 {
		return fmt.Errorf("generate.api: %s: %s answered a token-id prompt without token_ids (return_token_ids needs vLLM >= 0.10.2); use generate.api: chat", api, resp.Endpoint)
	}
	return g.checkGenerationPrompt(ctx)
}

// Turn runs one generation for r. Failures resolve r (error, or truncated
// for a context-length error or when the sequence is full); Turn itself
// returns an error only when ctx is done.
//
// Under a Policy (Options.Policy) it waits while the fleet is paused and
// tags the tokens it appends with their policy version (r.PolicyVersions);
// r's first turn records the version it was admitted at and its sampling
// parameters.
func (g *Generator) Turn(ctx context.Context, r *pipeline.Rollout) error {
	g.admit(r)
	req, stepwise, ok, err := g.next(ctx, r)
	if err != nil || !ok {
		return err
	}
	resp, segs, err := g.send(ctx, r, req, stepwise)
	if resp == nil {
		return err
	}
	noteAnswered(r, segs)
	if stepwise {
		g.applyStep(r, req, resp)
		return nil
	}
	g.apply(r, resp, req.PromptTokenIDs)
	tagVersions(r, segs)
	return nil
}

// NextRequest prepares r for its next turn as Turn does (in tokens mode
// the prompt's token ids from POST /tokenize, cut by prompt.max_tokens;
// max_tokens capped to the room max_seq_len leaves) and returns the
// request Turn would send, without sending it. ok is false when r
// resolved instead (a prompt too long, a full sequence, a failed
// /tokenize); the error is non-nil only when ctx is done. trajflow
// validate renders and sends the first requests with it.
func (g *Generator) NextRequest(ctx context.Context, r *pipeline.Rollout) (req *inference.Request, ok bool, err error) {
	req, _, ok, err = g.next(ctx, r)
	return req, ok, err
}

// next is NextRequest, and whether the request is a step-wise one.
func (g *Generator) next(ctx context.Context, r *pipeline.Rollout) (req *inference.Request, stepwise, ok bool, err error) {
	if r.Task != nil && r.Task.Invalid != "" {
		r.Fail(ClassInvalidRequest, fmt.Errorf("%s: %s", rowName(r), r.Task.Invalid))
		return nil, false, false, nil
	}
	if g.tokens() || g.opts.API.Caps().TextPrompt {
		if i := firstImage(r.Messages); i >= 0 {
			r.Fail(ClassImageUnsupported, fmt.Errorf("%s: message %d (%s, turn %d) holds an image, which generate.api: %s cannot send (it sends the prompt as token ids or text); use generate.api: chat",
				rowName(r), i, r.Messages[i].Role, r.Messages[i].Turn, g.opts.API))
			return nil, false, false, nil
		}
	}
	if msgs, ok := g.stepMessages(r); ok {
		req, ok, err := g.stepRequest(ctx, r, msgs)
		return req, true, ok, err
	}
	pending, ok, err := g.prepare(ctx, r)
	if err != nil || !ok {
		return nil, false, false, err
	}
	req = g.Request(r)
	if g.tokens() {
		// The current segment's tokens: all of them but where an agent
		// rewrote its history.
		req.PromptTokenIDs = r.Tokens()[segmentToken(r):]
	} else if m := g.maxSeqLen(r); m > 0 && pending > 0 {
		// Chat mode: the observations' ids are known but not in the
		// sequence yet (the server's prompt ids bring them); the room
		// left is after them.
		capMaxTokens(req.Params, m-len(r.PromptTokenIDs)-len(r.ResponseTokenIDs)-pending)
	}
	return req, false, true, nil
}

// complete sends req for r with sendCtx, a context of ctx. A failure
// resolves r (error, or truncated for a context-length error) and gives a
// nil response; the error is non-nil only when ctx is done, or
// errCancelledByPause when sendCtx alone ended (r is not resolved).
func (g *Generator) complete(ctx, sendCtx context.Context, r *pipeline.Rollout, req *inference.Request) (*inference.Response, error) {
	start := time.Now()
	resp, err := g.client.Complete(sendCtx, req)
	took := time.Since(start)
	r.GenTime += took
	if err != nil {
		if ctx.Err() != nil {
			g.reqs.cancelled(took)
			return nil, ctx.Err()
		}
		if sendCtx.Err() != nil {
			return nil, errCancelledByPause
		}
		if inference.ErrorClass(err) == inference.ClassContextLength {
			contextLength(r, "the server refused the first prompt", err)
			return nil, nil
		}
		var ie *inference.Error
		if errors.As(err, &ie) {
			r.HTTPStatus = ie.Status
			addDiscarded(r, ie.Discarded)
		}
		r.Fail(inference.ErrorClass(err), err)
		return nil, nil
	}
	addDiscarded(r, resp.Discarded)
	g.reqs.completed(took, resp.CompletionTokens)
	if err := g.silentCut(r, req, resp); err != nil {
		// The server answered a prompt it cut to its context: the reply
		// is thrown away, as a refusal would have left none.
		addDiscarded(r, inference.Usage{PromptTokens: resp.PromptTokens, CompletionTokens: resp.CompletionTokens, Tries: 1})
		contextLength(r, "the server cut the first prompt", err)
		return nil, nil
	}
	if g.tokens() && len(resp.Message.TokenIDs) == 0 && resp.CompletionTokens > 0 {
		r.Fail(inference.ClassBadResponse, fmt.Errorf("generate.api: %s: %s answered without token_ids (return_token_ids needs vLLM >= 0.10.2); use generate.api: chat", g.opts.API, resp.Endpoint))
		return nil, nil
	}
	return resp, nil
}

// contextLength resolves r for a prompt over the server's context: on
// the first turn nothing was generated and the row is an error of class
// context_length (first says what happened), never an empty ok row; on a
// later turn the trajectory ends truncated with the turns it has, and the
// row says why.
func contextLength(r *pipeline.Rollout, first string, err error) {
	if r.NumTurns == 0 {
		r.Fail(inference.ClassContextLength, fmt.Errorf("%s: %s: %w", rowName(r), first, err))
		return
	}
	r.Truncated = true
	r.FinishReason = FinishContextLength
	r.Error = fmt.Sprintf("turn %d: %v", r.NumTurns+1, err)
	r.Resolve(pipeline.StatusOK)
}

// silentCut returns a context_length error when a chat server without
// token ids answered with usage.prompt_tokens at its whole context
// (MaxModelLen, learnt where the server publishes it) for a prompt
// estimated longer than that: the server cut the prompt and the model
// answered what it only partly saw (Ollama does so with HTTP 200). The
// prompt's length is estimated as the previous turn's usage plus the new
// messages' (their text at 4 bytes a token), or, on the first turn or
// with a step-wise prompt, the messages' and tools' text alone. nil when
// the context is unknown or the prompt fits.
func (g *Generator) silentCut(r *pipeline.Rollout, req *inference.Request, resp *inference.Response) error {
	if g.tokens() || resp.PromptTokenIDs != nil {
		return nil
	}
	l := g.MaxModelLen()
	if l <= 0 || resp.PromptTokens < l {
		return nil
	}
	est := estimateTokens(req.Messages)
	for _, t := range req.Tools {
		est += (len(t) + 3) / 4
	}
	if last := lastAssistant(req.Messages); r.NumTurns > 0 && last >= 0 && len(req.Messages) == len(r.Messages) {
		est = max(est, r.LastUsageTokens+estimateTokens(req.Messages[last+1:]))
	}
	if est <= l {
		return nil
	}
	return &inference.Error{Class: inference.ClassContextLength, Msg: fmt.Sprintf(
		"%s answered with usage.prompt_tokens %d, its whole context (%d tokens), for a prompt of about %d tokens: it cut the prompt instead of refusing it (Ollama does; raise its num_ctx or OLLAMA_CONTEXT_LENGTH)",
		resp.Endpoint, resp.PromptTokens, l, est)}
}

// estimateTokens estimates the tokens of msgs' text (content and tool
// calls' arguments) at 4 bytes a token, and one token of each message's
// role header.
func estimateTokens(msgs []pipeline.Message) int {
	n := 0
	for i := range msgs {
		b := len(msgs[i].Content)
		for _, c := range msgs[i].ToolCalls {
			b += len(c.Name) + len(c.Arguments)
		}
		n += (b+3)/4 + 1
	}
	return n
}

// addDiscarded adds the replies thrown away to r's metrics.
func addDiscarded(r *pipeline.Rollout, u inference.Usage) {
	if u == (inference.Usage{}) {
		return
	}
	if r.Metrics == nil {
		r.Metrics = map[string]float64{}
	}
	r.Metrics[pipeline.MetricDiscardedReplies] += float64(u.Tries)
	r.Metrics[pipeline.MetricDiscardedPromptTokens] += float64(u.PromptTokens)
	r.Metrics[pipeline.MetricDiscardedCompletionTokens] += float64(u.CompletionTokens)
}

// stepMessages returns the step-wise request messages of r's next turn,
// and false when r's turns send the whole chat.
func (g *Generator) stepMessages(r *pipeline.Rollout) ([]pipeline.Message, bool) {
	if g.opts.StepPrompt == nil {
		return nil, false
	}
	return g.opts.StepPrompt(r)
}

// stepRequest builds one step-wise request: msgs (in tokens mode as the
// server's token ids of msgs), max_tokens capped to the room max_seq_len
// leaves the step. ok is false when r resolved instead.
func (g *Generator) stepRequest(ctx context.Context, r *pipeline.Rollout, msgs []pipeline.Message) (*inference.Request, bool, error) {
	req := g.Request(r)
	req.Messages = msgs
	var prompt []int32
	limit := g.opts.PromptMaxTokens
	if g.tokens() || limit > 0 || g.maxSeqLen(r) > 0 && g.tok != nil {
		ids, err := g.tokenize(ctx, r, msgs, r.Tools, true)
		switch {
		case err == nil:
			prompt = ids
		case ctx.Err() != nil:
			return nil, false, ctx.Err()
		case g.tokens():
			r.Fail(inference.ErrorClass(err), fmt.Errorf("generate.api: %s: POST /tokenize of the step's prompt: %w", g.opts.API, err))
			return nil, false, nil
		case limit > 0:
			r.Fail(inference.ErrorClass(err), fmt.Errorf("%s: prompt.max_tokens: POST /tokenize of the step's prompt: %w", rowName(r), err))
			return nil, false, nil
		}
	}
	if limit > 0 && len(prompt) > limit {
		// prompt.max_tokens bounds every step's prompt, as verl-agent's
		// max_prompt_length does; chat mode only refuses.
		n := len(prompt)
		cut, err := truncatePrompt(prompt, limit, g.opts.PromptTruncation)
		if err != nil {
			r.Fail(ClassPromptTooLong, fmt.Errorf("%s: step %d: %w", rowName(r), len(r.Steps)+1, err))
			return nil, false, nil
		}
		prompt = cut
		r.PromptTokensDropped += n - len(prompt)
	}
	if g.tokens() {
		req.PromptTokenIDs = prompt
	}
	if m := g.maxSeqLen(r); m > 0 && prompt != nil {
		// max_seq_len bounds each step's sequence (its prompt and response).
		if len(prompt) >= m && r.NumTurns == 0 {
			r.Fail(ClassPromptTooLong, firstTooLong(r, len(prompt), m))
			return nil, false, nil
		}
		if len(prompt) >= m {
			r.Truncated = true
			r.FinishReason = "length"
			r.Resolve(pipeline.StatusOK)
			return nil, false, nil
		}
		capMaxTokens(req.Params, m-len(prompt))
	}
	return req, true, nil
}

// applyStep records a step-wise turn: the response message, and the turn
// as a step of its own.
func (g *Generator) applyStep(r *pipeline.Rollout, req *inference.Request, resp *inference.Response) {
	prompt := req.PromptTokenIDs
	if !g.tokens() {
		prompt = resp.PromptTokenIDs
	}
	msg := g.message(r, resp)
	if idsMissing(resp) {
		r.TokenIDsMissing = true
	}
	r.Steps = append(r.Steps, pipeline.Step{
		PromptTokenIDs: prompt, ResponseTokenIDs: resp.Message.TokenIDs, Logprobs: stepLogprobs(resp.Message),
		RawPrompt: rawPrompt(req.Messages), ActionValid: true, Anchor: r.Anchor,
	})
	r.Messages = append(r.Messages, msg)
}

// rawPrompt is a step's request messages as JSON text, their roles and
// texts (verl-agent's raw_prompt).
func rawPrompt(msgs []pipeline.Message) *string {
	type chat struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	out := make([]chat, len(msgs))
	for i, m := range msgs {
		out[i] = chat{m.Role, m.Content}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil
	}
	s := string(b)
	return &s
}

// idsMissing reports whether resp generated something (usage's
// completion tokens, text or tool calls) without its token ids.
func idsMissing(resp *inference.Response) bool {
	m := &resp.Message
	return len(m.TokenIDs) == 0 && (resp.CompletionTokens > 0 || m.Content != "" || len(m.ToolCalls) > 0)
}

// stepLogprobs are a response's logprobs, one per generated token (zeros
// when the server sent none).
func stepLogprobs(m pipeline.Message) []float32 {
	if len(m.Logprobs) == len(m.TokenIDs) {
		return m.Logprobs
	}
	return make([]float32, len(m.TokenIDs))
}

// Request is the request Turn sends for r's next turn: the model, r's
// messages (step-wise: the step prompt's) and tools, and the parameters (the row's, the config's over
// them, the rollout's seed and stop strings, max_tokens capped to the room
// max_seq_len leaves). In tokens mode Turn adds the token-id prompt.
func (g *Generator) Request(r *pipeline.Rollout) *inference.Request {
	msgs := r.Messages[segmentStart(r):]
	step, stepwise := g.stepMessages(r)
	if stepwise {
		msgs = step
	}
	req := &inference.Request{
		Model:    g.opts.Model,
		Messages: msgs,
		Params:   g.requestParams(r),
		Tools:    r.Tools,
		Affinity: r.GroupID,
		Sample:   r.TrajID,
		API:      taskAPI(r),

		// Step-wise trajectories have no single sequence to route.
		RoutedExperts:       g.opts.RoutedExperts && !stepwise,
		RoutedExpertsLayers: g.opts.RoutedExpertsLayers,
	}
	if f := g.priority.Load(); f != nil {
		if p, ok := (*f)(r); ok {
			req.Priority = &p
		}
	}
	return req
}

// taskAPI is the API the row's own requests go to (pipeline.Task.API), ""
// for generate.api's.
func taskAPI(r *pipeline.Rollout) inference.API {
	if r.Task == nil {
		return ""
	}
	return inference.API(r.Task.API)
}

// Observe gives the observation that ended a trajectory (the messages
// after its last assistant message) its token ids, cut to max_seq_len,
// as the next request would have rendered them. In chat mode it needs a
// server that tokenizes; without one the observation keeps no ids. It
// returns an error only when ctx is done.
func (g *Generator) Observe(ctx context.Context, r *pipeline.Rollout) error {
	if r.Status != pipeline.StatusOK || g.tok == nil || r.NumTurns == 0 {
		return nil
	}
	if len(r.PromptTokenIDs) == 0 && len(r.ResponseTokenIDs) == 0 {
		return nil // the server reports no token ids: nothing to extend
	}
	ids, err := g.observationIDs(ctx, r)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if g.tokens() {
			// Resolved ok already; the row says what is missing.
			r.Error = fmt.Sprintf("the last observation has no token ids: %v", err)
		}
		return nil
	}
	g.appendObservation(r, ids)
	return nil
}

// prepare brings r's token sequence up to the next request: in tokens
// mode the first prompt's ids or the new observations' ids; with
// max_seq_len, a sequence with no room left ends the trajectory
// truncated. ok is false when r resolved instead. pending is, in chat
// mode, the length of the new observations' ids, measured but left for
// the server's prompt ids to bring.
func (g *Generator) prepare(ctx context.Context, r *pipeline.Rollout) (pending int, ok bool, err error) {
	first := r.NumTurns == 0
	limit := g.opts.PromptMaxTokens
	switch {
	case first && (g.tokens() || limit > 0 || g.maxSeqLen(r) > 0 && g.tok != nil):
		// The first prompt's ids: needed in tokens mode, and to know the
		// room left in chat mode.
		ids, err := g.tokenize(ctx, r, r.Messages, r.Tools, true)
		if err != nil {
			if ctx.Err() != nil {
				return 0, false, ctx.Err()
			}
			if g.tokens() {
				r.Fail(inference.ErrorClass(err), fmt.Errorf("generate.api: %s: POST /tokenize of the prompt: %w", g.opts.API, err))
				return 0, false, nil
			}
			if limit > 0 {
				r.Fail(inference.ErrorClass(err), fmt.Errorf("%s: prompt.max_tokens: POST /tokenize of the prompt: %w", rowName(r), err))
				return 0, false, nil
			}
			break // chat mode goes on without
		}
		if limit > 0 && len(ids) > limit {
			// verl's truncation of raw_prompt_ids; chat mode only refuses
			// (New allows nothing else there).
			n := len(ids)
			if ids, err = truncatePrompt(ids, limit, g.opts.PromptTruncation); err != nil {
				r.Fail(ClassPromptTooLong, fmt.Errorf("%s: %w", rowName(r), err))
				return 0, false, nil
			}
			r.PromptTokensDropped = n - len(ids)
		}
		r.PromptTokenIDs = ids
		setSpans(r.Messages, 0, len(ids))
	case freshSegment(r) && (g.tokens() || g.maxSeqLen(r) > 0 && g.tok != nil):
		// An agent rewrote its history: the new segment's prompt,
		// rendered whole, after the tokens so far.
		seg := r.Messages[segmentStart(r):]
		ids, err := g.tokenize(ctx, r, seg, r.Tools, true)
		if err != nil {
			if ctx.Err() != nil {
				return 0, false, ctx.Err()
			}
			if g.tokens() {
				r.Fail(inference.ErrorClass(err), fmt.Errorf("generate.api: %s: POST /tokenize of a rewritten history: %w", g.opts.API, err))
				return 0, false, nil
			}
			break
		}
		if !g.tokens() {
			pending = len(ids)
			break
		}
		start := len(r.PromptTokenIDs) + len(r.ResponseTokenIDs)
		if m := g.maxSeqLen(r); m > 0 && start+len(ids) >= m {
			ids = ids[:min(max(m-start, 0), len(ids))]
			r.Truncated = true
		}
		appendResponse(r, ids, nil, 0)
		setSpans(seg, start, start+len(ids))
	case !first && (g.tokens() || g.maxSeqLen(r) > 0 && g.tok != nil):
		ids, err := g.observationIDs(ctx, r)
		if err != nil {
			if ctx.Err() != nil {
				return 0, false, ctx.Err()
			}
			if g.tokens() {
				r.Fail(inference.ErrorClass(err), fmt.Errorf("generate.api: %s: the observation's token ids: %w", g.opts.API, err))
				return 0, false, nil
			}
			break
		}
		if g.tokens() || len(r.PromptTokenIDs)+len(r.ResponseTokenIDs)+len(ids) >= g.maxSeqLen(r) {
			// Chat mode appends only what fills the sequence: the
			// trajectory ends here, and the next render would have given
			// these ids.
			g.appendObservation(r, ids)
		} else {
			pending = len(ids)
		}
	}
	if msl := g.maxSeqLen(r); msl > 0 {
		n := len(r.PromptTokenIDs) + len(r.ResponseTokenIDs)
		if first && n >= msl {
			// No room to generate a token: an error row, never an ok
			// row of 0 turns.
			r.Fail(ClassPromptTooLong, firstTooLong(r, n, msl))
			return 0, false, nil
		}
		if n > msl {
			cutTokens(r, msl)
			n = msl
			r.Truncated = true
		}
		if r.Truncated || n >= msl {
			r.Truncated = true
			r.Resolve(pipeline.StatusOK)
			return 0, false, nil
		}
	}
	return pending, true, nil
}

// firstTooLong is the error of a first prompt of n tokens that leaves no
// room under max_seq_len msl.
func firstTooLong(r *pipeline.Rollout, n, msl int) error {
	return fmt.Errorf("%s: the first prompt is %d tokens, max_seq_len %d leaves no room to generate", rowName(r), n, msl)
}

// rowName names r's input row for errors: its source place
// ("tasks.jsonl:17") and task index.
func rowName(r *pipeline.Rollout) string {
	if r.Task.Source != "" {
		return fmt.Sprintf("%s (task %d)", r.Task.Source, r.Task.Index)
	}
	return fmt.Sprintf("task %d", r.Task.Index)
}

// truncatePrompt cuts ids, longer than limit, to limit ids as mode says
// (verl's data.truncation); "error" and "" return an error.
func truncatePrompt(ids []int32, limit int, mode string) ([]int32, error) {
	switch mode {
	case "left":
		return slices.Clone(ids[len(ids)-limit:]), nil
	case "right":
		return slices.Clone(ids[:limit]), nil
	case "middle":
		left := limit / 2
		return slices.Concat(ids[:left], ids[len(ids)-(limit-left):]), nil
	default:
		return nil, fmt.Errorf("prompt.max_tokens: the prompt has %d tokens, more than %d (prompt.truncation: error)", len(ids), limit)
	}
}

// templateArgs are r's template parameters (chat_template_kwargs, ...):
// the config's, else the row's, as its requests merge them.
func (g *Generator) templateArgs(r *pipeline.Rollout) map[string]any {
	var row map[string]any
	if r.Task != nil {
		row = inference.TemplateArgs(r.Task.Params)
	}
	cfg := inference.TemplateArgs(g.opts.Params)
	if row == nil {
		return cfg
	}
	for k, v := range cfg {
		row[k] = v
	}
	return row
}

// templateKey names r's template parameters, for the caches of renderings.
func (g *Generator) templateKey(r *pipeline.Rollout) string {
	args := g.templateArgs(r)
	if args == nil {
		return ""
	}
	b, err := json.Marshal(args) // map keys sorted: one name per set
	if err != nil {
		return fmt.Sprint(args)
	}
	return string(b)
}

// tokenize renders msgs with the server's template and r's template
// parameters. In chat mode a server that has no /tokenize is asked once.
func (g *Generator) tokenize(ctx context.Context, r *pipeline.Rollout, msgs []pipeline.Message, tools []json.RawMessage, gen bool) ([]int32, error) {
	if !g.tokens() {
		g.mu.Lock()
		no := g.noTokenize
		g.mu.Unlock()
		if no {
			return nil, errNoTokenize
		}
	}
	ids, err := g.tok.Tokenize(ctx, &inference.TokenizeRequest{Model: g.opts.Model, Messages: msgs, Tools: tools, AddGenerationPrompt: gen,
		TemplateArgs: g.templateArgs(r), Affinity: r.GroupID})
	var e *inference.Error
	if err != nil && !g.tokens() && errors.As(err, &e) && e.Class == inference.ClassHTTP {
		g.mu.Lock()
		g.noTokenize = true
		g.mu.Unlock()
	}
	return ids, err
}

var errNoTokenize = errors.New("the server has no /tokenize")

// PromptTokens is the length in the server's token ids (POST /tokenize) of
// r's first prompt as it would be sent, before prompt.max_tokens cuts it:
// the step-wise prompt of the first turn when env.history_length is set,
// else r's messages. trajflow validate reports it against the limit.
func (g *Generator) PromptTokens(ctx context.Context, r *pipeline.Rollout) (int, error) {
	if g.tok == nil {
		return 0, errNoTokenize
	}
	ids, err := g.tokenize(ctx, r, g.Request(r).Messages, r.Tools, true)
	return len(ids), err
}

// RenderedPrompt is r's first prompt as the server's template renders it.
type RenderedPrompt struct {
	// IDs are the prompt's token ids (POST /tokenize).
	IDs []int32
	// Text spells them (POST /detokenize); "" when TextErr is set.
	Text    string
	TextErr error
	// TemplateArgs are the template parameters sent with the /tokenize
	// call (chat_template_kwargs, ...); nil when none.
	TemplateArgs map[string]any
}

// RenderedPrompt renders r's first prompt (the step-wise prompt of the
// first turn when env.history_length is set) as the run would: POST
// /tokenize with r's template parameters, then POST /detokenize for its
// text when the server has it. trajflow validate shows it. It is nil (and
// no error) when the server cannot tokenize.
func (g *Generator) RenderedPrompt(ctx context.Context, r *pipeline.Rollout) (*RenderedPrompt, error) {
	if g.tok == nil {
		return nil, nil
	}
	ids, err := g.tokenize(ctx, r, g.Request(r).Messages, r.Tools, true)
	if err != nil {
		if errors.Is(err, errNoTokenize) {
			return nil, nil
		}
		return nil, err
	}
	p := &RenderedPrompt{IDs: ids, TemplateArgs: g.templateArgs(r)}
	if d, ok := g.client.(inference.Detokenizer); ok {
		p.Text, p.TextErr = d.Detokenize(ctx, g.opts.Model, ids)
	} else {
		p.TextErr = fmt.Errorf("%T cannot detokenize", g.client)
	}
	return p, nil
}

// MaxModelLen is the server's context length where the client knows it
// (inference.ContextLimiter; learnt from a /tokenize answer), else 0.
func (g *Generator) MaxModelLen() int {
	if l, ok := g.client.(inference.ContextLimiter); ok {
		return l.MaxModelLen()
	}
	return 0
}

// MaxSeqLen is r's max_seq_len (its route's); 0: none.
func (g *Generator) MaxSeqLen(r *pipeline.Rollout) int { return g.maxSeqLen(r) }

// MaxTokens is the max_tokens (or max_completion_tokens) r's first
// request asks for, capped to the room max_seq_len leaves after a prompt
// of n tokens; 0 when none is set and max_seq_len sets none.
func (g *Generator) MaxTokens(r *pipeline.Rollout, n int) int {
	p := g.Request(r).Params
	if m := g.maxSeqLen(r); m > 0 && m > n {
		capMaxTokens(p, m-n)
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok := toInt(p[k]); ok {
			return v
		}
	}
	return 0
}

// observationIDs returns the token ids of the messages after r's last
// assistant message: the server's rendering of a fixed conversation with
// and without them, differenced (inference.ObservationDelta).
func (g *Generator) observationIDs(ctx context.Context, r *pipeline.Rollout) ([]int32, error) {
	last := lastAssistant(r.Messages)
	if last < 0 || last == len(r.Messages)-1 {
		return nil, nil
	}
	if g.opts.ObservationTokens == "raw" {
		return g.rawObservationIDs(ctx, r, r.Messages[last+1:])
	}
	a := &r.Messages[last]
	base := inference.DeltaConversation(a)
	var without []int32
	key := g.templateKey(r)
	if len(a.ToolCalls) == 0 {
		g.mu.Lock()
		without = g.without[key]
		g.mu.Unlock()
	}
	if without == nil {
		var err error
		if without, err = g.tokenize(ctx, r, base, nil, false); err != nil {
			return nil, err
		}
		if len(a.ToolCalls) == 0 {
			g.mu.Lock()
			if g.without == nil {
				g.without = map[string][]int32{}
			}
			g.without[key] = without
			g.mu.Unlock()
		}
	}
	with, err := g.tokenize(ctx, r, slices.Concat(base, r.Messages[last+1:]), nil, true)
	if err != nil {
		return nil, err
	}
	eot := int32(-1)
	if a.TokenEnd > a.TokenStart && int(a.TokenEnd) <= len(r.PromptTokenIDs)+len(r.ResponseTokenIDs) {
		eot = tokenAt(r, int(a.TokenEnd)-1)
	}
	closing, err := g.closingIDs(ctx, r)
	if err != nil {
		return nil, err
	}
	return inference.ObservationDelta(without, with, eot, closing)
}

// rawObservationIDs tokenises each message's text alone, without the
// chat template or special tokens (NeMo RL's observation tokens), and
// concatenates the ids.
func (g *Generator) rawObservationIDs(ctx context.Context, r *pipeline.Rollout, msgs []pipeline.Message) ([]int32, error) {
	var out []int32
	for i := range msgs {
		if msgs[i].Content == "" {
			continue
		}
		ids, err := g.tok.Tokenize(ctx, &inference.TokenizeRequest{Model: g.opts.Model, Raw: true, Text: msgs[i].Content, Affinity: r.GroupID})
		if err != nil {
			return nil, err
		}
		out = append(out, ids...)
	}
	return out, nil
}

// closingIDs returns what the template writes after an assistant
// message's content (inference.ClosingConversations), computed once per
// set of template parameters.
func (g *Generator) closingIDs(ctx context.Context, r *pipeline.Rollout) ([]int32, error) {
	key := g.templateKey(r)
	g.mu.Lock()
	c := g.closing[key]
	g.mu.Unlock()
	if c != nil {
		return c, nil
	}
	a, b := inference.ClosingConversations()
	ra, err := g.tokenize(ctx, r, a, nil, false)
	if err != nil {
		return nil, err
	}
	rb, err := g.tokenize(ctx, r, b, nil, false)
	if err != nil {
		return nil, err
	}
	c = inference.CommonSuffix(ra, rb)
	g.mu.Lock()
	if g.closing == nil {
		g.closing = map[string][]int32{}
	}
	g.closing[key] = c
	g.mu.Unlock()
	return c, nil
}

// appendObservation appends the ids of the messages after the last
// assistant message (loss mask 0), cut to the room max_seq_len leaves; a
// sequence that reaches max_seq_len (cut or exactly full, as NeMo RL's
// >=) ends the trajectory truncated, the last observation of a
// terminated one too.
func (g *Generator) appendObservation(r *pipeline.Rollout, ids []int32) {
	start := len(r.PromptTokenIDs) + len(r.ResponseTokenIDs)
	if m := g.maxSeqLen(r); m > 0 && start+len(ids) >= m {
		ids = ids[:min(max(m-start, 0), len(ids))]
		r.Truncated = true
		r.Resolve(pipeline.StatusOK)
	}
	appendResponse(r, ids, nil, 0)
	setSpans(r.Messages[lastAssistant(r.Messages)+1:], start, start+len(ids))
}

// requestParams merges the row's parameters, the config's, and the
// rollout's own seed (unless it has none to send) and stop strings, and caps max_tokens to the room
// max_seq_len leaves.
func (g *Generator) requestParams(r *pipeline.Rollout) map[string]any {
	row := r.Task.Params
	if r.CallParams != nil {
		// An agent's call: its parameters over the row's, the config's
		// over both.
		row = inference.MergeParams(row, r.CallParams)
	}
	p := inference.MergeParams(row, g.opts.Params) // a new map
	if !r.NoSeed {
		p["seed"] = r.Seed
	}
	if len(r.StopStrings) > 0 {
		p["stop"] = r.StopStrings
	}
	if m := g.maxSeqLen(r); m > 0 {
		// The room left: after the known ids, or without them (a server
		// that reports none) after the last response's usage; never more
		// than max_seq_len.
		known := len(r.PromptTokenIDs) + len(r.ResponseTokenIDs)
		if known == 0 && !g.tokens() {
			known = r.LastUsageTokens
		}
		_, given := p["max_tokens"]
		_, givenC := p["max_completion_tokens"]
		if known > 0 || given || givenC {
			// With nothing known, an absent max_tokens stays absent (the
			// server's own bound) rather than max_seq_len, which the
			// prompt would push past the model's length.
			capMaxTokens(p, m-known)
		}
	}
	return p
}

// capMaxTokens sets max_tokens (or max_completion_tokens, when that is
// the key given) to at most room.
func capMaxTokens(p map[string]any, room int) {
	key := "max_tokens"
	if _, ok := p[key]; !ok {
		if _, ok := p["max_completion_tokens"]; ok {
			key = "max_completion_tokens"
		}
	}
	if v, ok := toInt(p[key]); ok && v <= room {
		return
	}
	p[key] = room
}

func toInt(v any) (int, bool) {
	switch x := v.(type) {
	case int:
		return x, true
	case int64:
		return int(x), true
	case float64:
		return int(x), true
	case interface{ Int64() (int64, error) }:
		n, err := x.Int64()
		return int(n), err == nil
	}
	return 0, false
}

// message counts a turn of r and returns its response as the turn's
// assistant message (tool calls parsed in tokens mode), without token
// spans.
func (g *Generator) message(r *pipeline.Rollout, resp *inference.Response) pipeline.Message {
	turn := r.NumTurns + 1
	r.NumTurns = turn
	r.PromptTokens += resp.PromptTokens
	r.CompletionTokens += resp.CompletionTokens
	if resp.CachedPromptTokens > 0 {
		if r.Metrics == nil {
			r.Metrics = map[string]float64{}
		}
		r.Metrics[pipeline.MetricCachedPromptTokens] += float64(resp.CachedPromptTokens)
	}
	r.LastUsageTokens = resp.PromptTokens + resp.CompletionTokens
	r.FinishReason = resp.FinishReason
	r.Extra = resp.Extra
	r.Response, r.RequestID = resp.Raw, resp.RequestID

	msg := resp.Message
	msg.Role = pipeline.RoleAssistant
	msg.Turn = turn
	if g.tokens() && len(r.Tools) > 0 {
		content, calls := inference.ParseToolCalls(msg.Content)
		if len(calls) > 0 {
			for i := range calls {
				calls[i].ID = fmt.Sprintf("call_%d_%d", turn, i)
			}
			msg.Content, msg.ToolCalls = content, calls
			if r.FinishReason == "stop" {
				r.FinishReason = "tool_calls"
			}
		}
	}
	r.ToolCalls += len(msg.ToolCalls)
	return msg
}

// apply appends the response to the trajectory. prompt is the token-id
// prompt sent (tokens mode), nil otherwise.
func (g *Generator) apply(r *pipeline.Rollout, resp *inference.Response, prompt []int32) {
	msg := g.message(r, resp)
	if g.opts.RecordSteps {
		if !g.tokens() {
			prompt = resp.PromptTokenIDs
		}
		r.Steps = append(r.Steps, pipeline.Step{
			PromptTokenIDs: prompt, ResponseTokenIDs: resp.Message.TokenIDs, Logprobs: stepLogprobs(resp.Message),
			ActionValid: true, Anchor: r.Anchor,
		})
	}
	if !g.tokens() {
		g.follow(r, resp.PromptTokenIDs)
	}
	start := len(r.PromptTokenIDs) + len(r.ResponseTokenIDs)
	ids := resp.Message.TokenIDs
	if len(ids) > 0 {
		appendResponse(r, ids, resp.Message.Logprobs, 1)
		msg.TokenStart, msg.TokenEnd = int32(start), int32(start+len(ids))
	}
	if resp.Routes != nil && g.tokens() && prompt != nil {
		// The answer's routes cover the prompt sent (the current
		// segment's tokens, from its first) and the answer.
		routes, err := r.Routes.Merge(resp.Routes, start-len(prompt))
		if err != nil {
			r.Messages = append(r.Messages, msg)
			r.Fail(inference.ClassBadResponse, fmt.Errorf("%s: turn %d: %w", rowName(r), r.NumTurns, err))
			return
		}
		r.Routes = routes
	}
	if idsMissing(resp) || len(r.PromptTokenIDs) == 0 {
		// The reply's tokens, or the prompt's, are not in the sequence:
		// its counts are unknown (null in the output), never 0. Logprobs
		// that came without ids are dropped with them: they could not
		// be placed in the sequence.
		r.TokenIDsMissing = true
	}
	r.Messages = append(r.Messages, msg)

	if m := g.maxSeqLen(r); m > 0 {
		n := len(r.PromptTokenIDs) + len(r.ResponseTokenIDs)
		if n > m {
			// Only where the server's render was longer than measured
			// (chat mode): the row keeps what fits.
			cutTokens(r, m)
		}
		// The server's count of the sequence (usage: this turn's prompt
		// and completion) is the measure when it reports no token ids (a
		// chat server such as Ollama): a prompt grown by observations no
		// /tokenize measured can pass the bound, and the row says so.
		if n >= m || resp.PromptTokens+resp.CompletionTokens >= m {
			r.Truncated = true
		}
	}
}

// follow extends the trajectory's token view with a chat-mode request's
// prompt ids p. When p starts with the whole sequence, its extension is
// the observations' ids (loss mask 0). When the server re-rendered earlier
// turns (a continuity break, counted), the sequence is cut where it and p
// part and continues with the rest of p (loss mask 0): the row then starts
// with exactly this request's prompt, and mask 1 stays only on tokens
// generated in exactly the context before them.
func (g *Generator) follow(r *pipeline.Rollout, p []int32) {
	if p == nil {
		return // the server reports no prompt ids: nothing to check
	}
	if r.NumTurns == 1 && len(r.ResponseTokenIDs) == 0 {
		// The first prompt, as the server rendered it (it replaces the
		// ids measured for max_seq_len).
		r.PromptTokenIDs = p
		setSpans(r.Messages, 0, len(p))
		return
	}
	seg := segmentStart(r)
	if k := len(r.Segments); k > 0 && int(r.Segments[k-1].Turn) == r.NumTurns {
		// The first answer of a segment an agent's rewritten history
		// began: its prompt, whole, after the tokens so far.
		start := len(r.PromptTokenIDs) + len(r.ResponseTokenIDs)
		appendResponse(r, p, nil, 0)
		setSpans(r.Messages[seg:], start, start+len(p))
		return
	}
	n := len(r.PromptTokenIDs) + len(r.ResponseTokenIDs)
	origP := len(r.PromptTokenIDs)
	o := segmentToken(r)
	l := o + inference.CommonPrefix(r.Tokens()[o:], p)
	if l < n {
		r.TokenContinuityBreaks++
		cutTokens(r, l)
	}
	end := o + len(p)
	last := lastAssistant(r.Messages)
	for k := seg; k < len(r.Messages); k++ {
		m := &r.Messages[k]
		switch {
		case k > last:
			m.TokenStart, m.TokenEnd = int32(l), int32(end)
		case int(m.TokenEnd) > l:
			// Re-rendered: it shares the block of the render.
			m.TokenStart, m.TokenEnd = min(m.TokenStart, int32(l)), int32(end)
		}
	}
	if l < origP {
		// The render changed the first prompt itself (the first
		// segment's: o is 0).
		k := min(origP, len(p))
		r.PromptTokenIDs = p[:k:k]
		appendResponse(r, p[k:], nil, 0)
		return
	}
	appendResponse(r, p[l-o:], nil, 0)
}

// appendResponse appends ids to the response with the given loss mask
// value and logprobs (zeros when lp does not match ids), and keeps
// EnvTokens, the response's mask-0 tokens.
func appendResponse(r *pipeline.Rollout, ids []int32, lp []float32, mask int8) {
	n := len(ids)
	if n == 0 {
		return
	}
	if len(lp) != n {
		lp = make([]float32, n)
	}
	if len(r.ResponseTokenIDs) == 0 && len(r.LossMask) == 0 && len(r.ResponseLogprobs) == 0 {
		// Share the response's arrays (capped, so that a later append
		// copies rather than writes into them) instead of copying them.
		r.ResponseTokenIDs = ids[:n:n]
		r.ResponseLogprobs = lp[:n:n]
	} else {
		r.ResponseTokenIDs = append(r.ResponseTokenIDs, ids...)
		r.ResponseLogprobs = append(r.ResponseLogprobs, lp...)
	}
	for range n {
		r.LossMask = append(r.LossMask, mask)
	}
	if mask == 0 {
		r.EnvTokens += n
	}
}

// cutTokens cuts the sequence PromptTokenIDs ++ ResponseTokenIDs to its
// first n tokens, and the messages' spans with it. The cut slices are
// capped so that later appends never write into arrays shared with
// responses.
func cutTokens(r *pipeline.Rollout, n int) {
	p := len(r.PromptTokenIDs)
	if n <= p {
		r.PromptTokenIDs = r.PromptTokenIDs[:n:n]
		r.ResponseTokenIDs, r.LossMask, r.ResponseLogprobs = nil, nil, nil
	} else {
		k := n - p
		r.ResponseTokenIDs = r.ResponseTokenIDs[:k:k]
		r.LossMask = r.LossMask[:k:k]
		r.ResponseLogprobs = r.ResponseLogprobs[:k:k]
	}
	cutSpans(r, int32(n))
	r.Routes = r.Routes.Cut(n)
	r.EnvTokens = 0
	for _, m := range r.LossMask {
		if m == 0 {
			r.EnvTokens++
		}
	}
	for k := range r.Messages {
		m := &r.Messages[k]
		m.TokenStart, m.TokenEnd = min(m.TokenStart, int32(n)), min(m.TokenEnd, int32(n))
	}
}

// setSpans gives msgs, rendered together, the span [start, end).
func setSpans(msgs []pipeline.Message, start, end int) {
	for k := range msgs {
		msgs[k].TokenStart, msgs[k].TokenEnd = int32(start), int32(end)
	}
}

func lastAssistant(msgs []pipeline.Message) int {
	for k := len(msgs) - 1; k >= 0; k-- {
		if msgs[k].Role == pipeline.RoleAssistant {
			return k
		}
	}
	return -1
}

func tokenAt(r *pipeline.Rollout, i int) int32 {
	if i < len(r.PromptTokenIDs) {
		return r.PromptTokenIDs[i]
	}
	return r.ResponseTokenIDs[i-len(r.PromptTokenIDs)]
}
