package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/trajflow/trajflow/envs"
	mathenv "github.com/trajflow/trajflow/envs/math"
	"github.com/trajflow/trajflow/pipeline"
)

// Name is the environment's registered name.
const Name = "tools"

func init() { envs.Register(Name, New) }

// Built-in tool names.
const (
	Calculator   = "calculator"
	SubmitAnswer = "submit_answer"
)

// definitions are the built-in tools in OpenAI's function-calling format.
var definitions = map[string]json.RawMessage{
	Calculator: json.RawMessage(`{"type":"function","function":{"name":"calculator",` +
		`"description":"Evaluate an arithmetic expression: + - * / and parentheses over integers and decimals.",` +
		`"parameters":{"type":"object","properties":{"expression":{"type":"string","description":"The expression, e.g. (12.5 + 3) * 4"}},` +
		`"required":["expression"],"additionalProperties":false}}}`),
	SubmitAnswer: json.RawMessage(`{"type":"function","function":{"name":"submit_answer",` +
		`"description":"Submit the final answer. This ends the task.",` +
		`"parameters":{"type":"object","properties":{"answer":{"type":"string","description":"The final answer, e.g. 42 or 3/4"}},` +
		`"required":["answer"],"additionalProperties":false}}}`),
}

// builtins lists the built-in tools in the order they are offered.
var builtins = []string{Calculator, SubmitAnswer}

// Options are the tools environment's config keys.
type Options struct {
	// AnswerField is the task field holding the expected answer.
	//
	// Default: `expected_answer`.
	AnswerField string `yaml:"answer_field"`
	// Tools are the enabled tools: calculator, submit_answer.
	//
	// Default: all of them.
	Tools []string `yaml:"tools"`
}

// Env offers the enabled tools and answers the model's calls. A
// trajectory's counters travel in Rollout.State as a [State].
type Env struct {
	answerField string
	enabled     []string
	defs        []json.RawMessage
}

var _ envs.Env = (*Env)(nil)

// New builds the tools environment from its options.
func New(opts envs.Options) (envs.Env, error) {
	o := Options{AnswerField: mathenv.DefaultAnswerField}
	if err := opts.Decode(&o); err != nil {
		return nil, err
	}
	sec := opts.Section
	if sec == "" {
		sec = "env"
	}
	if o.AnswerField == "" {
		return nil, fmt.Errorf("%s.answer_field: must not be empty", sec)
	}
	if o.Tools == nil {
		o.Tools = builtins
	}
	e := &Env{answerField: o.AnswerField}
	for _, name := range o.Tools {
		def, ok := definitions[name]
		if !ok {
			return nil, fmt.Errorf("%s.tools: unknown tool %q (have %s)", sec, name, strings.Join(builtins, ", "))
		}
		if slices.Contains(e.enabled, name) {
			return nil, fmt.Errorf("%s.tools: %q is listed twice", sec, name)
		}
		e.enabled = append(e.enabled, name)
		e.defs = append(e.defs, def)
	}
	return e, nil
}

// State counts a trajectory's tool calls.
type State struct {
	// Calls counts tool calls; Errors those answered with an error.
	Calls, Errors int
}

// Reset offers the enabled tools.
func (e *Env) Reset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{Tools: slices.Clone(e.defs), State: State{}}, nil
}

// Step answers each tool call of the model's message with a tool message. A
// message without tool calls is the final answer; so is a submit_answer call.
func (e *Env) Step(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	st, _ := r.State.(State) // a missing state starts the counts at zero
	step := &envs.Step{ReportsValidity: true}
	if len(action.ToolCalls) == 0 {
		answer, ok := mathenv.ExtractAnswer(action.Content)
		if !ok {
			answer = strings.TrimSpace(action.Content)
		}
		if err := e.finish(r, step, answer); err != nil {
			return nil, err
		}
	}
	for _, call := range action.ToolCalls {
		st.Calls++
		var out string
		if step.Terminated {
			out = "not run: the answer was already submitted"
		} else {
			var err error
			var valid bool
			out, valid, err = e.call(r, step, call)
			if err != nil {
				return nil, err
			}
			if !valid {
				step.InvalidAction = true
			}
			if strings.HasPrefix(out, "error: ") {
				st.Errors++
			}
		}
		step.Observations = append(step.Observations, pipeline.Message{
			Role: pipeline.RoleTool, Content: out, ToolCallID: call.ID, Name: call.Name, Turn: action.Turn,
		})
	}
	if step.Metrics == nil {
		step.Metrics = map[string]float64{}
	}
	step.Metrics["tool_calls"] = float64(st.Calls)
	step.Metrics["tool_errors"] = float64(st.Errors)
	step.State = st
	return step, nil
}

// call runs one tool call and returns the tool message's text; errors the
// model made come back as text starting "error: ". valid is false for a
// call the environment cannot run at all: an unknown tool, or arguments
// without the tool's argument (an expression the calculator cannot
// evaluate is a valid action with an error as its answer). The error
// return is the task's (a missing answer field).
func (e *Env) call(r *pipeline.Rollout, step *envs.Step, call pipeline.ToolCall) (out string, valid bool, err error) {
	if !slices.Contains(e.enabled, call.Name) {
		return fmt.Sprintf("error: unknown tool %q (available: %s)", call.Name, strings.Join(e.enabled, ", ")), false, nil
	}
	key := "expression"
	if call.Name == SubmitAnswer {
		key = "answer"
	}
	arg, err := stringArgument(call.Arguments, key)
	if err != nil {
		return "error: " + err.Error(), false, nil
	}
	switch call.Name {
	case Calculator:
		v, err := Calculate(arg)
		if err != nil {
			return "error: " + err.Error(), true, nil
		}
		return FormatNumber(v), true, nil
	default: // SubmitAnswer
		if err := e.finish(r, step, arg); err != nil {
			return "", true, err
		}
		return "answer submitted", true, nil
	}
}

// finish grades the final answer and ends the episode.
func (e *Env) finish(r *pipeline.Rollout, step *envs.Step, answer string) error {
	want, err := mathenv.ExpectedAnswer(r.Task, e.answerField)
	if err != nil {
		return err
	}
	acc := 0.0
	if mathenv.Equal(answer, want) {
		acc = 1
	}
	step.Reward = acc
	step.Terminated = true
	step.Metrics = map[string]float64{"acc": acc}
	return nil
}

// stringArgument reads one string argument from a call's JSON arguments.
func stringArgument(arguments, key string) (string, error) {
	if strings.TrimSpace(arguments) == "" {
		arguments = "{}"
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return "", fmt.Errorf("arguments are not a JSON object: %v", err)
	}
	raw, ok := args[key]
	if !ok {
		return "", fmt.Errorf("missing argument %q", key)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		// A number where a string is due is read as written ("answer": 42).
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return "", fmt.Errorf("argument %q must be a string", key)
		}
		s = n.String()
	}
	return s, nil
}
