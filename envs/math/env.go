package math

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
)

// Name is the environment's registered name.
const Name = "math"

func init() { envs.Register(Name, New) }

// Options are the math environment's config keys.
type Options struct {
	// AnswerField is the task field holding the expected answer.
	//
	// Default: `expected_answer`.
	AnswerField string `yaml:"answer_field"`
}

// DefaultAnswerField is answer_field's default.
const DefaultAnswerField = "expected_answer"

// Env grades one reply against the task's expected answer.
type Env struct {
	answerField string
}

var _ envs.Env = (*Env)(nil)

// New builds the math environment from its options.
func New(opts envs.Options) (envs.Env, error) {
	o := Options{AnswerField: DefaultAnswerField}
	if err := opts.Decode(&o); err != nil {
		return nil, err
	}
	if o.AnswerField == "" {
		return nil, fmt.Errorf("%s.answer_field: must not be empty", section(opts))
	}
	return &Env{answerField: o.AnswerField}, nil
}

func section(opts envs.Options) string {
	if opts.Section == "" {
		return "env"
	}
	return opts.Section
}

// Reset starts a trajectory; the task's prompt is all the model needs.
func (e *Env) Reset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{}, nil
}

// Step grades the reply: reward 1 and metric acc 1 when its answer equals the
// expected one, else 0. The trajectory always ends.
func (e *Env) Step(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	want, err := ExpectedAnswer(r.Task, e.answerField)
	if err != nil {
		return nil, err
	}
	reward := 0.0
	if got, ok := ExtractAnswer(action.Content); ok && Equal(got, want) {
		reward = 1
	}
	return &envs.Step{
		Reward:     reward,
		Terminated: true,
		Metrics:    map[string]float64{"acc": reward},
	}, nil
}

// ExpectedAnswer returns the task's field as an answer string: a string as
// is, a number in plain decimal form. A missing or non-scalar field is an
// error naming the row and the field.
func ExpectedAnswer(t *pipeline.Task, field string) (string, error) {
	if t == nil {
		return "", fmt.Errorf("rollout has no task (field %s)", field)
	}
	v, ok := t.Fields[field]
	if !ok || v == nil {
		return "", fmt.Errorf("%s: task has no field %q (env.answer_field)", rowName(t), field)
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32), nil
	case int:
		return strconv.Itoa(x), nil
	case int32:
		return strconv.FormatInt(int64(x), 10), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case json.Number:
		return x.String(), nil
	default:
		return "", fmt.Errorf("%s: field %q is a %T, want a string or number", rowName(t), field, v)
	}
}

func rowName(t *pipeline.Task) string {
	if t.Source != "" {
		return t.Source
	}
	return fmt.Sprintf("task %d", t.Index)
}
