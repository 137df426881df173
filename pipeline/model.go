package pipeline

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Status is how a rollout resolved. Every rollout that enters a pipeline
// resolves exactly once.
type Status string

const (
	// StatusPending marks a rollout that has not resolved yet.
	StatusPending Status = ""
	// StatusOK is a rollout that ran to its end (terminated, truncated or out of turns).
	StatusOK Status = "ok"
	// StatusError is a rollout that failed; Error and ErrorClass say why.
	StatusError Status = "error"
	// StatusCancelled is a rollout stopped before its end (target reached, interrupt).
	StatusCancelled Status = "cancelled"
	// StatusFiltered is a rollout whose group a keep rule dropped.
	StatusFiltered Status = "filtered"
)

// Roles of messages.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Task is one input row.
type Task struct {
	// Index is the row's 0-based position in the input, stable across shards
	// and resumes.
	Index int64
	// Source names where the row came from ("tasks.jsonl:17"), for errors.
	Source string
	// Raw is the input row as JSON, written to the output's task column.
	Raw json.RawMessage
	// Fields are the row's top-level fields, decoded. Templates and
	// environments read them (e.g. "question", "expected_answer").
	Fields map[string]any
	// Messages is the rendered prompt: the row's own messages (NeMo Gym's
	// responses_create_params.input, or a messages field) or the output of
	// the prompt templates.
	Messages []Message
	// Params are per-task request parameters (NeMo Gym's
	// responses_create_params without input), merged under the config's.
	Params map[string]any
	// Tools are OpenAI function-calling tool definitions carried by the row.
	Tools []json.RawMessage
	// StopStrings are the row's own stop_strings field (NeMo RL's datum
	// key): its rollouts' stop strings until the environment changes them.
	StopStrings []string
	// Env is the environment route that steps the task's rollouts (the
	// env section's routes, chosen per row); empty: the run's only
	// environment.
	Env string
	// API, when set, is the API this row's requests go to, chat or
	// completions, in place of generate.api (an OpenAI Batch line's url
	// chooses it).
	API string
	// CustomID is the row's own id (an OpenAI Batch line's custom_id),
	// which the OpenAI Batch output names each result by.
	CustomID string
	// Invalid, when set, says why the row's request cannot be sent (an
	// OpenAI Batch line with an unsupported url, or stream: true): its
	// rollouts fail without a request, and the run goes on.
	Invalid string
}

// ToolCall is an OpenAI function call made by the model.
type ToolCall struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ContentPart is one OpenAI content part of a message that holds images:
// a text part (Type "text", Text) or an image part (Type "image_url",
// ImageURL: a data URL, an http(s) URL, or in output files written with
// output.images: reference, "sha256:HEX" naming the bytes of a data URL).
type ContentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	ImageURL string `json:"image_url,omitempty"`
}

// Content part types.
const (
	PartText  = "text"
	PartImage = "image_url"
)

// Message is one message of a trajectory.
type Message struct {
	Role string `json:"role"`
	// Content is the message's text: a text-only message's whole content,
	// or the texts of Parts joined with "\n".
	Content string `json:"content"`
	// Parts are the message's content parts, in order, when it holds an
	// image; nil for a text-only message (then Content is everything).
	Parts      []ContentPart `json:"parts,omitempty"`
	ToolCalls  []ToolCall    `json:"tool_calls,omitempty"`
	ToolCallID string        `json:"tool_call_id,omitempty"`
	Name       string        `json:"name,omitempty"`
	// TokenIDs are the message's token ids when known: for assistant messages
	// the generated ids, for others the ids the server reported for them.
	TokenIDs []int32 `json:"token_ids,omitempty"`
	// Logprobs are the generation logprobs of TokenIDs (assistant messages).
	Logprobs []float32 `json:"logprobs,omitempty"`
	// TokenStart and TokenEnd are the message's span [TokenStart, TokenEnd)
	// in the rollout's token sequence PromptTokenIDs ++ ResponseTokenIDs,
	// chat-template tokens around the message included. An empty span
	// (TokenStart == TokenEnd) means the message's tokens are not in the
	// sequence.
	TokenStart int32 `json:"token_start,omitempty"`
	TokenEnd   int32 `json:"token_end,omitempty"`
	// Turn is the turn the message belongs to: 0 for the prompt, k for the
	// k-th generation and the environment's answer to it.
	Turn int `json:"turn"`
}

// Rollout is one sample of a task: the messages of all its turns and how it
// resolved. A rollout is owned by one goroutine at a time; stages hand it on
// over channels.
type Rollout struct {
	RunID        string
	Task         *Task
	Attempt      int
	RolloutIndex int
	// GroupSize is n, the number of rollouts in this rollout's group.
	GroupSize int
	GroupID   string
	TrajID    string
	// Seed is the rollout's seed: the row's own, or one derived from
	// repeat.seed (see stages/repeat).
	Seed int64
	// NoSeed: no seed is sent with the rollout's requests (no repeat.seed
	// configured and no seed of the row's own); Seed is then trajflow's
	// derived seed, kept for retries and the output's seed column.
	NoSeed bool
	// GymSeed: the seed is written into the NeMo Gym
	// responses_create_params of the rollout (repeat.add_seed, Gym's
	// num_repeats_add_seed), in metadata.extra_body.
	GymSeed bool
	// ConfigParams are the config's request parameters (generate.params),
	// which the generate stage lays over the task's own; NeMo Gym's
	// responses_create_params repeat them, as Gym merges its config
	// overrides into every row. Shared by the rollouts of a run: read
	// only. Not written out.
	ConfigParams map[string]any
	Env          string
	Model        string

	Messages []Message
	// PromptTokenIDs are the token ids of the initial prompt as the server
	// reported them on the first turn.
	PromptTokenIDs []int32
	// PromptTokensDropped is how many ids of the initial prompt
	// prompt.max_tokens cut (prompt.truncation left, right or middle); 0
	// when none.
	PromptTokensDropped int
	// ResponseTokenIDs are every token after the initial prompt: generated
	// tokens and the environment's observation tokens, in order. LossMask
	// has one entry per token (1 = generated by the model) and
	// ResponseLogprobs one per token (0 for observation tokens).
	ResponseTokenIDs []int32
	LossMask         []int8
	ResponseLogprobs []float32
	// TokenIDsMissing is set when a reply of the rollout came without its
	// token ids (chat mode against a server that reports none: Ollama,
	// OpenAI, SGLang's OpenAI API) or no first prompt's ids were known
	// when it came: the training view (PromptTokenIDs, ResponseTokenIDs,
	// LossMask, ResponseLogprobs) is then not the sequence the model saw,
	// and its counts (gen_tokens, env_tokens, total_tokens,
	// turn_gen_tokens) are unknown, written as null (empty for
	// turn_gen_tokens) rather than 0. The servers' usage (PromptTokens,
	// CompletionTokens) still counts the tokens.
	TokenIDsMissing bool

	Reward      float64
	TurnRewards []float64
	Metrics     map[string]float64

	Status     Status
	Error      string
	ErrorClass string
	// Retries is how many times this sample was tried again after failing.
	Retries int

	FinishReason          string
	Terminated            bool
	Truncated             bool
	MaxTurnsReached       bool
	NumTurns              int
	TokenContinuityBreaks int
	ToolCalls             int

	GroupRewardMean float64
	GroupRewardStd  float64
	Advantage       float64
	Kept            bool
	FilterReason    string

	PromptTokens     int
	CompletionTokens int
	EnvTokens        int
	GenTime          time.Duration
	EnvTime          time.Duration
	Started          time.Time
	TotalTime        time.Duration

	// State is the environment's state for the next turn. Not written out.
	State any
	// LastUsageTokens is the last response's usage (prompt_tokens +
	// completion_tokens): the server's length of the sequence so far,
	// which bounds the next prompt from below when no token ids are
	// known. Not written out.
	LastUsageTokens int
	// StopStrings are extra stop strings the environment asked for; they
	// apply to every later turn until the environment changes them. Not
	// written out.
	StopStrings []string
	// Extra is machine-readable data the server attached to the last
	// response beyond the OpenAI fields (the simulator's trailer, for one),
	// for environments that read it. Not written out.
	Extra json.RawMessage
	// Tools are the tool definitions sent with every request: the task's,
	// or the ones the environment's Reset returned. Not written out.
	Tools []json.RawMessage
	// Response is the body of the last reply as the server sent it, and
	// RequestID the server's id of that request (its x-request-id), when
	// the client keeps them (output.openai_batch). Not written to Parquet.
	Response  json.RawMessage
	RequestID string
	// HTTPStatus is the HTTP status of the last failed request (0: none, or
	// no HTTP answer). Not written to Parquet.
	HTTPStatus int

	// Steps are the trajectory's steps, one per turn, in order: what each
	// request held and what the environment made of its answer. They are
	// written as step rows (output.steps).
	Steps []Step
	// InvalidActions counts the steps whose action the environment marked
	// invalid.
	InvalidActions int
	// Anchor is the anchor observation of the environment's current state
	// (the last Reset's or Step's); nil: none. Not written out.
	Anchor *string

	// PolicyVersions are the policy versions of the generated tokens:
	// half-open spans over the positions of the sequence PromptTokenIDs ++
	// ResponseTokenIDs, in order, one span per run of tokens generated
	// under one known version (or one range of versions). Positions that
	// no span covers were not generated (prompt, observations).
	PolicyVersions []VersionSpan
	// AdmittedVersion is the policy version when the rollout was admitted
	// (its first request prepared).
	AdmittedVersion int64
	// AnsweredVersion is the oldest policy version that one of r's
	// answers was requested under (nil before its first answer). It is
	// known where spans are not: an answer without token ids (generate.api
	// chat without return_token_ids) has no positions to tag. Not written
	// out: min_policy_version holds it.
	AnsweredVersion *int64
	// Sampling are the sampling parameters of the rollout's requests.
	Sampling Sampling

	// Segments are the places where an agent rewrote its history (a call
	// whose messages do not extend the previous call's messages and
	// answer: a summary, a cut, an edit): each starts a new segment of the
	// trajectory, whose prompt is rendered whole after the previous
	// segment's tokens. Empty: the trajectory is one segment (always, for
	// trajectories trajflow's own loop drives).
	Segments []Segment
	// Routes are the experts a mixture-of-experts engine routed the
	// positions of PromptTokenIDs ++ ResponseTokenIDs to
	// (generate.routed_experts): nil when no answer of the rollout
	// brought any. Positions past Routes.Positions(), and those Routes
	// marks NotRouted, were never routed (observations no later prompt
	// sent, the last generated token).
	Routes *Routes
	// CallParams are the request parameters of the call an agent made
	// through the gateway (its temperature, max_tokens, tool_choice, …),
	// laid under the config's as a row's own are. Not written out.
	CallParams map[string]any
}

// Segment is where a new segment of an agent's trajectory starts (see
// Rollout.Segments).
type Segment struct {
	// Message is the index in Messages of the segment's first message.
	Message int32
	// Token is the position in PromptTokenIDs ++ ResponseTokenIDs of the
	// segment's first token; -1 when the row holds no token ids there
	// (TokenIDsMissing).
	Token int32
	// Turn is the turn of the segment's first answer.
	Turn int32
}

// NoteAnswered records that an answer requested under policy version v
// (the oldest that may have generated it) was added to r.
func (r *Rollout) NoteAnswered(v int64) {
	if r.AnsweredVersion == nil || v < *r.AnsweredVersion {
		r.AnsweredVersion = &v
	}
}

// VersionSpan says which policy version generated the tokens at positions
// [Start, End) of a rollout's sequence. Version is the oldest version
// that may have generated them and VersionMax the newest: they are equal
// when the version is known, and differ when the weights changed while a
// request was in flight and the server did not say at which token.
type VersionSpan struct {
	Version    int64
	VersionMax int64
	Start      int32
	End        int32
}

// Sampling are the sampling parameters a rollout's requests were sent
// with; nil: not set (the server's default applied).
type Sampling struct {
	Temperature *float64
	TopP        *float64
	TopK        *int32
	MaxTokens   *int32
}

// MinPolicyVersion is the oldest version among r's spans; where r has
// none, the oldest version an answer of r's was requested under
// (AnsweredVersion), else AdmittedVersion (nothing generated).
func (r *Rollout) MinPolicyVersion() int64 {
	if len(r.PolicyVersions) == 0 {
		if r.AnsweredVersion != nil {
			return *r.AnsweredVersion
		}
		return r.AdmittedVersion
	}
	m := r.PolicyVersions[0].Version
	for _, s := range r.PolicyVersions[1:] {
		m = min(m, s.Version)
	}
	return m
}

// Step is one turn of a trajectory seen as a training sample: the
// request's prompt, the model's answer, and the environment's judgement.
type Step struct {
	// PromptTokenIDs are the token ids of the request's prompt as the
	// server saw it; ResponseTokenIDs and Logprobs the generated ids and
	// their logprobs. Recorded only when the generator keeps steps.
	PromptTokenIDs   []int32
	ResponseTokenIDs []int32
	Logprobs         []float32
	// RawPrompt is the step's request as text, a JSON list of {"role",
	// "content"} (verl-agent's raw_prompt with return_raw_chat), in
	// step-wise mode; nil with the whole chat (the trajectory's messages
	// hold it).
	RawPrompt *string
	// Reward is the step's reward as the environment gave it.
	Reward float64
	// Penalty is the invalid-action penalty charged to the step
	// (env.invalid_action_penalty when the environment marked the action
	// invalid, else 0). It is taken off the step's Return and its episode
	// score, as verl-agent's apply_invalid_action_penalty does, not off
	// Reward or the rollout's reward.
	Penalty float64
	// ActionValid is false when the environment marked the action invalid.
	ActionValid bool
	// Anchor is the anchor observation of the state the action was taken
	// at; nil: the environment gave none.
	Anchor *string
	// Return is the discounted return of the step rewards from this step
	// on (groups.gamma), less the step's Penalty.
	Return float64
	// AnchorGroup numbers the step's anchor group within its group (0, 1,
	// … in order of first appearance); -1 when the step has no anchor.
	AnchorGroup int
	// AnchorGroupSize, AnchorMean and AnchorStd describe the anchor group's
	// returns (GiGPO's step_norm_reward: a group of one has its own return
	// as mean and std 1, so its advantage is 0); Advantage is the
	// step-level advantage computed from them.
	AnchorGroupSize int
	AnchorMean      float64
	AnchorStd       float64
	Advantage       float64
	// EpisodeAdvantage is GiGPO's episode-level advantage of the step: its
	// episode score (the rollout's reward less the step's Penalty)
	// normalised over the scores of every step of the group;
	// JointAdvantage is EpisodeAdvantage + groups.step_advantage_w ×
	// Advantage, the advantage GiGPO trains the step on.
	EpisodeAdvantage float64
	JointAdvantage   float64
}

// HasImages reports whether m holds an image part.
func (m *Message) HasImages() bool {
	for _, p := range m.Parts {
		if p.Type == PartImage {
			return true
		}
	}
	return false
}

// Tokens returns the rollout's token sequence, PromptTokenIDs ++
// ResponseTokenIDs, as a new slice.
func (r *Rollout) Tokens() []int32 {
	out := make([]int32, 0, len(r.PromptTokenIDs)+len(r.ResponseTokenIDs))
	out = append(out, r.PromptTokenIDs...)
	return append(out, r.ResponseTokenIDs...)
}

// SeqCountsKnown reports whether the training view's counts (gen_tokens,
// env_tokens, total_tokens, turn_gen_tokens) are known: false when
// TokenIDsMissing.
func (r *Rollout) SeqCountsKnown() bool { return !r.TokenIDsMissing }

// TurnGenTokens appends to dst[:0] the tokens the model generated in
// each turn t = 1, 2, …: entry t-1 is the sum of TokenEnd - TokenStart
// over the assistant messages of turn t (their spans in the token
// sequence; 0 where the sequence does not hold them). It has an entry per
// turn up to the larger of NumTurns and the last assistant turn. Collate
// writes it as the turn_gen_tokens column; summed over rows it is NeMo
// RL's total_gen_tokens_per_turn.
func (r *Rollout) TurnGenTokens(dst []int32) []int32 {
	n := max(r.NumTurns, 0)
	for i := range r.Messages {
		if m := &r.Messages[i]; m.Role == RoleAssistant {
			n = max(n, m.Turn)
		}
	}
	dst = slices.Grow(dst[:0], n)[:n]
	clear(dst)
	for i := range r.Messages {
		m := &r.Messages[i]
		if m.Role == RoleAssistant && m.Turn >= 1 && m.TokenEnd > m.TokenStart {
			dst[m.Turn-1] += m.TokenEnd - m.TokenStart
		}
	}
	return dst
}

// Key identifies a rollout across runs and resumes.
type Key struct {
	TaskIndex    int64
	Attempt      int
	RolloutIndex int
}

// Key returns the rollout's resume key.
func (r *Rollout) Key() Key {
	return Key{TaskIndex: r.Task.Index, Attempt: r.Attempt, RolloutIndex: r.RolloutIndex}
}

// GroupKey identifies a group: one task in one attempt.
type GroupKey struct {
	TaskIndex int64
	Attempt   int
}

// GroupKey returns the key of the rollout's group.
func (r *Rollout) GroupKey() GroupKey {
	return GroupKey{TaskIndex: r.Task.Index, Attempt: r.Attempt}
}

// Fail resolves the rollout as an error of the given class. It never
// overwrites an earlier resolution.
func (r *Rollout) Fail(class string, err error) {
	if r.Status != StatusPending {
		return
	}
	r.Status = StatusError
	r.ErrorClass = class
	if err != nil {
		r.Error = err.Error()
	}
}

// Resolve sets the rollout's status unless it already has one.
func (r *Rollout) Resolve(s Status) {
	if r.Status == StatusPending {
		r.Status = s
	}
}

// Done reports whether the rollout has resolved.
func (r *Rollout) Done() bool { return r.Status != StatusPending }

// AddMetric sets a named metric.
func (r *Rollout) AddMetric(name string, v float64) {
	if r.Metrics == nil {
		r.Metrics = make(map[string]float64)
	}
	r.Metrics[name] = v
}

// String names the rollout for logs and errors.
func (r *Rollout) String() string {
	return fmt.Sprintf("task %d attempt %d rollout %d", r.Task.Index, r.Attempt, r.RolloutIndex)
}

// Group is the n rollouts of one task in one attempt, after every member
// resolved.
type Group struct {
	Key      GroupKey
	Rollouts []*Rollout
	Mean     float64
	Std      float64
	Kept     bool
	// FilterReason says why a dropped group was dropped.
	FilterReason string
}

// Row metrics (the metrics column) the generate stage records, which the
// cost counts: the replies a client threw away and sent again (an invalid
// structured output) with their tokens, and the prompt tokens a server
// served from its prompt cache.
const (
	MetricDiscardedReplies          = "discarded_replies"
	MetricDiscardedPromptTokens     = "discarded_prompt_tokens"
	MetricDiscardedCompletionTokens = "discarded_completion_tokens"
	MetricCachedPromptTokens        = "cached_prompt_tokens"
)
