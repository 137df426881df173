package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// input is one request, reduced to what the simulated model reads.
type input struct {
	promptIDs []int32
	promptKey uint64
	// question is the text searched for an arithmetic question: the last
	// user message (chat) or the prompt (completions).
	question string
	// image is the size of the first image of the last user message
	// (ImageSize); -1 when it holds none.
	image     int
	turn      int
	sampleKey uint64
	hasSeed   bool
	seed      int64
	maxTokens int // 0: not given
	tools     []json.RawMessage
	// groupSize, rolloutIndex, attempt from request extras; groupSize 0
	// when absent.
	groupSize, rolloutIndex, attempt int
	// game is the number game the conversation plays; nil when none.
	game *game
	// grid is the grid world of the conversation, if any.
	grid *grid
}

// reply is what the simulated model generates for one input.
type reply struct {
	content string
	// text is what the ids spell, tool calls included (the completions
	// text of a token-id prompt).
	text      string
	toolCalls []pipeline.ToolCall
	ids       []int32
	logprobs  []float32
	finish    string
	trailer   Trailer
}

// badRequest is a client error the server answers with a 400.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

// contextLengthError is vLLM's context-length 400.
type contextLengthError struct{ max, prompt, completion int }

func (e *contextLengthError) Error() string {
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
		e.max, e.prompt+e.completion, e.prompt, e.completion)
}

// template is the server's chat template.
func (s *Server) template() Template { return Template{StripReasoning: s.opts.StripReasoning} }

// chatInput reduces a chat request.
func (s *Server) chatInput(msgs []pipeline.Message, params map[string]any, tools []json.RawMessage) (*input, error) {
	if len(msgs) == 0 {
		return nil, &badRequest{"messages: at least one message is required"}
	}
	return s.messagesInput(msgs, tools, s.template().TemplateFor(params["chat_template_kwargs"]).Render(msgs, tools, true), params)
}

// tokenInput reduces a completions request whose prompt is token ids: the
// messages and tools are read back from the ids (as the template rendered
// them), so that the draws are those of the same conversation in chat.
// Ids that hold no whole rendered message (a prompt cut by
// prompt.truncation, say) are taken as a raw prompt, their detokenized
// text, as a server takes any ids.
func (s *Server) tokenInput(ids []int32, params map[string]any) (*input, error) {
	if len(ids) == 0 {
		return nil, &badRequest{"prompt: empty"}
	}
	msgs, tools := parseRendered(ids)
	if len(msgs) == 0 {
		in, err := s.completionInput(Detokenize(ids, false), params)
		if in != nil {
			in.promptIDs = ids
		}
		return in, err
	}
	return s.messagesInput(msgs, tools, ids, params)
}

// messagesInput reduces a conversation whose prompt ids are promptIDs.
func (s *Server) messagesInput(msgs []pipeline.Message, tools []json.RawMessage, promptIDs []int32, params map[string]any) (*input, error) {
	in := &input{promptIDs: promptIDs, tools: tools, image: -1}
	h := newHasher()
	for i := range msgs {
		h.str(msgs[i].Role)
		h.str(messageText(&msgs[i]))
		if msgs[i].Role == pipeline.RoleUser {
			break
		}
	}
	in.promptKey = h.sum()
	for i := range msgs {
		switch msgs[i].Role {
		case pipeline.RoleAssistant:
			in.turn++
		case pipeline.RoleUser:
			in.question = msgs[i].Content
			in.image = -1
			for _, p := range msgs[i].Parts {
				if p.Type == pipeline.PartImage {
					in.image = ImageSize(p.ImageURL)
					break
				}
			}
		}
	}
	in.game, _ = findGame(msgs)
	if in.game == nil {
		in.grid, _ = findGrid(msgs)
	}
	return in, s.readParams(in, params)
}

// completionInput reduces a raw-prompt completions request.
func (s *Server) completionInput(prompt string, params map[string]any) (*input, error) {
	h := newHasher()
	h.str(prompt)
	in := &input{promptIDs: Tokenize(prompt), promptKey: h.sum(), question: prompt, image: -1}
	return in, s.readParams(in, params)
}

func (s *Server) readParams(in *input, params map[string]any) error {
	if v, ok := params["seed"]; ok && v != nil {
		seed, ok := toInt(v)
		if !ok {
			return &badRequest{fmt.Sprintf("seed: want an integer, got %v", v)}
		}
		in.seed, in.hasSeed = seed, true
		in.sampleKey = key(domLenSample, uint64(seed))
	} else {
		in.sampleKey = key(domNoSeed, s.noSeed.Add(1))
	}
	for _, name := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok := params[name]; ok && v != nil {
			n, ok := toInt(v)
			if !ok || n < 1 {
				return &badRequest{fmt.Sprintf("%s: want an integer >= 1, got %v", name, v)}
			}
			in.maxTokens = int(min(n, math.MaxInt32))
		}
	}
	ints := []struct {
		name string
		dst  *int
		min  int64
	}{{"sim_group_size", &in.groupSize, 1}, {"sim_rollout_index", &in.rolloutIndex, 0}, {"sim_attempt", &in.attempt, 0}}
	for _, p := range ints {
		if v, ok := params[p.name]; ok && v != nil {
			n, ok := toInt(v)
			if !ok || n < p.min || n > math.MaxInt32 {
				return &badRequest{fmt.Sprintf("%s: want an integer >= %d, got %v", p.name, p.min, v)}
			}
			*p.dst = int(n)
		}
	}
	if in.groupSize > 0 && in.rolloutIndex >= in.groupSize {
		return &badRequest{fmt.Sprintf("sim_rollout_index: %d is not below sim_group_size %d", in.rolloutIndex, in.groupSize)}
	}
	return nil
}

// toInt reads a JSON-ish integer.
func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint64:
		return int64(x), x <= math.MaxInt64
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<62 {
			return 0, false
		}
		return int64(x), true
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	}
	return 0, false
}

// taskAccuracy is the probability that a task's answers are right: drawn
// around the configured accuracy on the logit scale (σ 1).
func (s *Server) taskAccuracy(promptKey uint64) float64 {
	acc := s.opts.Accuracy
	if acc <= 0 || acc >= 1 {
		return acc
	}
	z := normal(key(s.seed, domTaskAcc, promptKey))
	return 1 / (1 + math.Exp(-(math.Log(acc/(1-acc)) + z)))
}

// correct decides whether the trajectory of in is right.
func (s *Server) correct(in *input) bool {
	pTask := s.taskAccuracy(in.promptKey)
	n, r, g := in.groupSize, in.rolloutIndex, in.attempt
	if n == 0 && s.opts.GroupSize > 0 && in.hasSeed {
		d := in.seed - s.opts.BaseSeed
		gs := int64(s.opts.GroupSize)
		r = int(((d % gs) + gs) % gs)
		g = int((d - int64(r)) / gs)
		n = s.opts.GroupSize
	}
	if s.opts.Keep < 0 || n == 0 {
		return uniform(key(s.seed, domCorrect, in.promptKey, in.sampleKey)) < pTask
	}
	gk := key(in.promptKey, uint64(g))
	if n >= 2 && uniform(key(s.seed, domGroup, gk)) < s.opts.Keep {
		k := 1 + int(mix(key(s.seed, domGroup, gk, 1))%uint64(n-1))
		// rank of r in a permutation of 0..n-1 drawn from the group key
		hr := mix(key(s.seed, domGroupPerm, gk, uint64(r)))
		rank := 0
		for i := 0; i < n; i++ {
			hi := mix(key(s.seed, domGroupPerm, gk, uint64(i)))
			if hi < hr || hi == hr && i < r {
				rank++
			}
		}
		return rank < k
	}
	return uniform(key(s.seed, domCorrect, gk)) < pTask
}

// trailer draws the workload of in's trajectory at its turn.
func (s *Server) trailer(in *input, correct bool) Trailer {
	o := &s.opts
	t := Trailer{Correct: correct}
	total := o.MinTurns + int(mix(key(s.seed, domTurns, in.promptKey, in.sampleKey))%uint64(o.MaxTurns-o.MinTurns+1))
	t.TurnsLeft = max(total-1-in.turn, 0)
	turn := uint64(in.turn)
	if o.EnvDelay > 0 {
		z := normal(key(s.seed, domEnvDelay, in.promptKey, in.sampleKey, turn))
		ms := float64(o.EnvDelay) / 1e6 * math.Exp(0.5*z) * o.TimeScale
		t.EnvDelayMs = math.Round(ms*1000) / 1000
	}
	if o.ObsTokens > 0 {
		z := normal(key(s.seed, domObs, in.promptKey, in.sampleKey, turn))
		t.ObsTokens = max(1, int(math.Round(float64(o.ObsTokens)*math.Exp(0.5*z))))
	}
	return t
}

// length draws the response length in tokens (before any cap).
func (s *Server) length(in *input) int {
	lm := s.opts.Length
	zp := normal(key(s.seed, domLenPrompt, in.promptKey))
	zs := normal(key(s.seed, domLenSample, in.promptKey, in.sampleKey, uint64(in.turn)))
	logL := math.Log(lm.Median) + lm.Sigma*(math.Sqrt(lm.Rho)*zp+math.Sqrt(1-lm.Rho)*zs)
	l := math.Round(math.Exp(logL))
	if l < 1 || math.IsNaN(l) {
		return 1
	}
	if l > 1<<30 {
		return 1 << 30
	}
	return int(l)
}

// generate produces the reply to in. A prompt that ends in a prefix of
// the answer its conversation gets (the partial output of an aborted
// request, sent again after it: continuation) is answered with the rest
// of that answer, as a model continues what it began; any other open
// assistant text gets an answer of its own.
func (s *Server) generate(in *input) (*reply, error) {
	if rep, ok := s.continuation(in); ok {
		return rep, nil
	}
	return s.draw(in)
}

// continuation answers in when its prompt ends in an assistant message
// begun (after the last assistant marker, with no end) that is a prefix
// of the answer drawn for the prompt without it: the rest of that
// answer, its max_tokens counted from the prefix's start; ok is false
// otherwise.
func (s *Server) continuation(in *input) (*reply, bool) {
	ids := in.promptIDs
	start := len(ids) - 1
	for start >= 0 && ids[start] != TokAssistant {
		start--
	}
	if start < 0 {
		return nil, false
	}
	tail := ids[start+1:]
	if len(tail) == 0 || slices.Contains(tail, TokEnd) {
		return nil, false
	}
	whole := *in
	whole.promptIDs = ids[:start+1]
	if in.maxTokens > 0 {
		whole.maxTokens = in.maxTokens + len(tail)
	}
	rep, err := s.draw(&whole)
	if err != nil || len(rep.ids) <= len(tail) || !slices.Equal(rep.ids[:len(tail)], tail) {
		return nil, false
	}
	k := len(tail)
	rep.ids = rep.ids[k:]
	rep.logprobs = rep.logprobs[k:]
	rep.text = Detokenize(rep.ids, true)
	rep.content = rep.text
	rep.toolCalls = nil
	return rep, true
}

// draw produces the answer to in's conversation.
func (s *Server) draw(in *input) (*reply, error) {
	o := &s.opts
	limit := o.Length.Cap
	if in.maxTokens > 0 {
		limit = in.maxTokens
	}
	if o.MaxModelLen > 0 {
		p := len(in.promptIDs)
		if in.maxTokens > 0 && p+in.maxTokens > o.MaxModelLen || p >= o.MaxModelLen {
			return nil, &contextLengthError{max: o.MaxModelLen, prompt: p, completion: in.maxTokens}
		}
		limit = min(limit, o.MaxModelLen-p)
	}

	correct := s.correct(in)
	rep := &reply{trailer: s.trailer(in, correct)}
	turn := uint64(in.turn)

	// The tail: a tool call, or the answer to an arithmetic question.
	var tail, sep string
	var call *pipeline.ToolCall
	if len(in.tools) > 0 && uniform(key(s.seed, domTool, in.promptKey, in.sampleKey, turn)) < o.ToolCallRate {
		if name, args, ok := toolCall(in.tools[0]); ok {
			call = &pipeline.ToolCall{
				ID:        fmt.Sprintf("call_%016x", key(s.seed, domTool, in.promptKey, in.sampleKey, turn, 1)),
				Type:      "function",
				Name:      name,
				Arguments: args,
			}
			tail, sep = toolCallText(name, args), "\n"
		}
	}
	if call == nil {
		if in.image >= 0 {
			// It "sees" the image: its size, answered like arithmetic.
			n := strconv.Itoa(in.image)
			if !correct {
				n = wrongAnswer(n, key(s.seed, domWrong, in.promptKey, in.sampleKey, turn))
			}
			tail, sep = `The image has `+n+` bytes: \boxed{`+n+`}`, " "
		} else if right, ok := FindArithmetic(in.question); ok {
			n := right
			if !correct {
				n = wrongAnswer(right, key(s.seed, domWrong, in.promptKey, in.sampleKey, turn))
			}
			tail, sep = `The answer is \boxed{`+n+`}`, " "
		} else if in.game != nil {
			move := in.game.move(correct, key(s.seed, domGame, in.promptKey, in.sampleKey, turn))
			tail, sep = in.game.tail(move), " "
		} else if in.grid != nil {
			tail, sep = in.grid.move(correct, key(s.seed, domGrid, in.promptKey, in.sampleKey, turn)), " "
		}
	}
	tailTokens := len(Tokenize(tail))
	if tail != "" {
		tailTokens = len(Tokenize(sep + tail))
	}
	filler := max(s.length(in)-1-tailTokens, 0)

	content, fillerIDs := fillerWords(filler, func(i int) uint64 {
		return mix(key(s.seed, domWord, in.promptKey, in.sampleKey, turn, uint64(i)))
	})
	prefix, fillerText := "", content
	if o.StripReasoning && !noThinking(in.promptIDs) {
		prefix = thinkOpen
		content, sep = thinkOpen+content+thinkClose, "\n"
	}
	text := content
	if tail != "" {
		if text != "" {
			text += sep
		}
		text += tail
	}
	ids := tokenizeAround(prefix, fillerIDs, text[len(prefix)+len(fillerText):])
	switch {
	case len(ids)+1 > limit:
		ids = ids[:limit]
		rep.content = Detokenize(ids, false)
		rep.ids = Tokenize(rep.content)
		rep.finish = "length"
	case call != nil:
		rep.content = content
		rep.toolCalls = []pipeline.ToolCall{*call}
		rep.ids = append(ids, TokEnd)
		rep.finish = "tool_calls"
	default:
		rep.content = text
		rep.ids = append(ids, TokEnd)
		rep.finish = "stop"
	}
	rep.text = Detokenize(rep.ids, true)
	rep.logprobs = make([]float32, len(rep.ids))
	for i := range rep.logprobs {
		z := normal(key(s.seed, domLogprob, in.promptKey, in.sampleKey, turn, uint64(i)))
		rep.logprobs[i] = float32(-0.02 - 0.6*math.Abs(z))
	}
	return rep, nil
}

// toolCall reads the first tool's name and makes plausible arguments: a
// value per required parameter (strings "sim", numbers 1, booleans true),
// as Python's json.dumps writes them ({"e": "sim"}).
func toolCall(raw json.RawMessage) (name, args string, ok bool) {
	var t struct {
		Name     string `json:"name"`
		Function struct {
			Name       string `json:"name"`
			Parameters struct {
				Properties map[string]struct {
					Type any `json:"type"`
				} `json:"properties"`
				Required []string `json:"required"`
			} `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", "", false
	}
	name = t.Function.Name
	if name == "" {
		name = t.Name
	}
	if name == "" {
		return "", "", false
	}
	req := append([]string(nil), t.Function.Parameters.Required...)
	sort.Strings(req)
	vals := map[string]any{}
	for _, r := range req {
		typ, _ := t.Function.Parameters.Properties[r].Type.(string)
		switch typ {
		case "integer", "number":
			vals[r] = 1
		case "boolean":
			vals[r] = true
		case "array":
			vals[r] = []any{}
		case "object":
			vals[r] = map[string]any{}
		default:
			vals[r] = "sim"
		}
	}
	b, err := json.Marshal(vals)
	if err != nil {
		return "", "", false
	}
	// Written as Qwen writes them (its template's tojson: Python's
	// separators), which is also how vLLM's hermes parser stores them.
	args, err = inference.PythonJSON(b)
	if err != nil {
		return "", "", false
	}
	return name, args, true
}

// noThinking says whether prompt ends with the generation prompt of
// enable_thinking: false (the assistant start id and an empty think
// block): the simulated model then writes no reasoning.
func noThinking(prompt []int32) bool {
	think := appendTokens([]int32{TokAssistant}, emptyThink)
	return len(prompt) >= len(think) && slices.Equal(prompt[len(prompt)-len(think):], think)
}
