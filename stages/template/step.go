package template

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// Default templates of step-wise prompting (env.step_template and
// env.history_template), after verl-agent's memory-based prompts.
const (
	DefaultStepTemplate = "{task}\n\n{history}Your current observation (step {step}):\n{observation}"
	// DefaultHistoryTemplate renders one earlier step; the rendered steps
	// are concatenated into {history}, oldest first.
	DefaultHistoryTemplate = "Step {step} observation:\n{observation}\nStep {step} action:\n{action}\n\n"
)

// Placeholders of the step and history templates.
var (
	stepFields    = []string{"task", "history", "history_length", "observation", "step"}
	historyFields = []string{"step", "observation", "action"}
)

// StepPrompt builds step-wise requests: rather than the whole chat, each
// turn sends the task, the last HistoryLength (observation, action) steps
// and the current observation, rendered into one user message (after the
// prompt's system messages). It is immutable and safe for concurrent use.
type StepPrompt struct {
	historyLength int
	step, history []segment
}

// NewStepPrompt parses the step and history templates (the defaults where
// empty) for a window of historyLength earlier steps. Errors are
// *pipeline.KeyError at step_template or history_template, naming an
// unknown placeholder and the known ones.
func NewStepPrompt(historyLength int, stepTemplate, historyTemplate string) (*StepPrompt, error) {
	if stepTemplate == "" {
		stepTemplate = DefaultStepTemplate
	}
	if historyTemplate == "" {
		historyTemplate = DefaultHistoryTemplate
	}
	var errs []error
	if historyLength < 0 {
		errs = append(errs, &pipeline.KeyError{Key: "history_length", Msg: fmt.Sprintf("must be >= 0, got %d", historyLength)})
	}
	step, err := parseFixed(stepTemplate, "step_template", stepFields)
	if err != nil {
		errs = append(errs, err)
	}
	hist, err := parseFixed(historyTemplate, "history_template", historyFields)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &StepPrompt{historyLength: historyLength, step: step, history: hist}, nil
}

// parseFixed parses a template whose placeholders are a fixed set.
func parseFixed(s, key string, known []string) ([]segment, error) {
	segs, err := parse(s, key)
	if err != nil {
		return nil, err
	}
	for _, sg := range segs {
		if sg.field == "" {
			continue
		}
		if sg.format != "" || !slices.Contains(known, sg.field) {
			return nil, &pipeline.KeyError{Key: key, Msg: fmt.Sprintf("unknown placeholder {%s} (have {%s})", sg.field, strings.Join(known, "}, {"))}
		}
	}
	return segs, nil
}

// fill renders fixed-placeholder segments from values.
func fill(b *strings.Builder, segs []segment, values map[string]string) {
	for _, s := range segs {
		if s.field == "" {
			b.WriteString(s.lit)
		} else {
			b.WriteString(values[s.field])
		}
	}
}

// Messages returns the request of r's next turn: the system messages of
// r's prompt (its first len(r.Task.Messages) messages), then one user
// message rendering the step template with
//
//   - {task}: the text of the prompt's other messages, joined by blank lines;
//   - {observation}: the current observation (the environment's messages
//     after the last action, or those of its reset before the first);
//   - {history}: the last HistoryLength steps (observation, action), each
//     rendered by the history template, oldest first;
//   - {history_length}: how many steps {history} holds;
//   - {step}: the number of steps taken so far.
//
// Images are kept: when the prompt's other messages or the current
// observation hold image parts, the user message holds the rendered text
// as its first part, then those images in order (the prompt's, then the
// observation's), as verl-agent sends the current observation's image
// with each step. The images of earlier observations are not repeated;
// the history shows their text.
func (p *StepPrompt) Messages(r *pipeline.Rollout) []pipeline.Message {
	np := 0
	if r.Task != nil {
		np = min(len(r.Task.Messages), len(r.Messages))
	}
	var out []pipeline.Message
	var task []string
	var images, obsImages []pipeline.ContentPart
	for _, m := range r.Messages[:np] {
		if m.Role == pipeline.RoleSystem || m.Role == "developer" {
			out = append(out, pipeline.Message{Role: m.Role, Content: m.Content, Parts: m.Parts})
			continue
		}
		task = append(task, m.Content)
		images = appendImages(images, m)
	}
	// obs[t] is the observation the (t+1)-th action was taken at;
	// actions[t] the (t+1)-th action.
	obs := []string{""}
	var actions []string
	for _, m := range r.Messages[np:] {
		if m.Role == pipeline.RoleAssistant {
			actions = append(actions, actionText(m))
			obs = append(obs, "")
			obsImages = obsImages[:0]
			continue
		}
		obsImages = appendImages(obsImages, m)
		cur := &obs[len(obs)-1]
		if *cur != "" {
			*cur += "\n"
		}
		*cur += m.Content
	}
	n := len(actions)
	first := max(n-p.historyLength, 0)
	var hist strings.Builder
	for j := first; j < n; j++ {
		fill(&hist, p.history, map[string]string{"step": strconv.Itoa(j + 1), "observation": obs[j], "action": actions[j]})
	}
	var b strings.Builder
	fill(&b, p.step, map[string]string{
		"task":           strings.Join(task, "\n\n"),
		"history":        hist.String(),
		"history_length": strconv.Itoa(n - first),
		"observation":    obs[n],
		"step":           strconv.Itoa(n),
	})
	user := pipeline.Message{Role: pipeline.RoleUser, Content: b.String()}
	if images = append(images, obsImages...); len(images) > 0 {
		user.Parts = append([]pipeline.ContentPart{{Type: pipeline.PartText, Text: user.Content}}, images...)
	}
	return append(out, user)
}

// appendImages appends m's image parts to dst.
func appendImages(dst []pipeline.ContentPart, m pipeline.Message) []pipeline.ContentPart {
	for _, p := range m.Parts {
		if p.Type == pipeline.PartImage {
			dst = append(dst, p)
		}
	}
	return dst
}

// actionText is an action as the history shows it: its content, then one
// line per tool call, name(arguments).
func actionText(m pipeline.Message) string {
	s := m.Content
	for _, c := range m.ToolCalls {
		if s != "" {
			s += "\n"
		}
		s += c.Name + "(" + c.Arguments + ")"
	}
	return s
}
