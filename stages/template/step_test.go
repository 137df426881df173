package template_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/template"
)

// played is a rollout after n steps of a game: the prompt, the reset's
// observation, then (action k, observation k) for k = 1..n.
func played(n int) *pipeline.Rollout {
	prompt := []pipeline.Message{{Role: pipeline.RoleSystem, Content: "Be brief."}, {Role: pipeline.RoleUser, Content: "Find the exit."}}
	r := &pipeline.Rollout{Task: &pipeline.Task{Messages: prompt}, Messages: append([]pipeline.Message{}, prompt...)}
	r.Messages = append(r.Messages, pipeline.Message{Role: pipeline.RoleUser, Content: "obs0"})
	for k := 1; k <= n; k++ {
		r.Messages = append(r.Messages,
			pipeline.Message{Role: pipeline.RoleAssistant, Content: fmt.Sprintf("act%d", k), Turn: k},
			pipeline.Message{Role: pipeline.RoleUser, Content: fmt.Sprintf("obs%d", k), Turn: k})
	}
	r.NumTurns = n
	return r
}

func TestStepPrompt(t *testing.T) {
	tests := []struct {
		k, steps int
		want     string
	}{
		{0, 0, "Find the exit.|0|0||obs0"},
		{2, 0, "Find the exit.|0|0||obs0"},
		{0, 3, "Find the exit.|3|0||obs3"},
		{2, 1, "Find the exit.|1|1|[1 obs0 act1]|obs1"},
		{2, 3, "Find the exit.|3|2|[2 obs1 act2][3 obs2 act3]|obs3"},
		{5, 3, "Find the exit.|3|3|[1 obs0 act1][2 obs1 act2][3 obs2 act3]|obs3"},
	}
	for _, tt := range tests {
		p, err := template.NewStepPrompt(tt.k, "{task}|{step}|{history_length}|{history}|{observation}", "[{step} {observation} {action}]")
		if err != nil {
			t.Fatal(err)
		}
		msgs := p.Messages(played(tt.steps))
		if len(msgs) != 2 || msgs[0].Role != pipeline.RoleSystem || msgs[0].Content != "Be brief." || msgs[1].Role != pipeline.RoleUser {
			t.Fatalf("k=%d steps=%d: messages %+v", tt.k, tt.steps, msgs)
		}
		if msgs[1].Content != tt.want {
			t.Errorf("k=%d steps=%d: %q, want %q", tt.k, tt.steps, msgs[1].Content, tt.want)
		}
	}
}

func TestStepPromptErrors(t *testing.T) {
	tests := []struct {
		k          int
		step, hist string
		want       []string
	}{
		{-1, "", "", []string{"history_length: must be >= 0"}},
		{1, "{question}", "", []string{"step_template: unknown placeholder {question} (have {task}, {history}"}},
		{1, "", "{task}", []string{"history_template: unknown placeholder {task}"}},
		{1, "{task:json}", "{action", []string{"step_template: unknown placeholder {task}", "history_template: unterminated {"}},
	}
	for _, tt := range tests {
		_, err := template.NewStepPrompt(tt.k, tt.step, tt.hist)
		var ke *pipeline.KeyError
		if err == nil || !errors.As(err, &ke) {
			t.Fatalf("%v %q %q: err %v, want key errors", tt.k, tt.step, tt.hist, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q lacks %q", err, w)
			}
		}
	}
}

func ExampleStepPrompt() {
	p, _ := template.NewStepPrompt(1, "", "")
	r := played(2)
	fmt.Println(p.Messages(r)[1].Content)
	// Output:
	// Find the exit.
	//
	// Step 2 observation:
	// obs1
	// Step 2 action:
	// act2
	//
	// Your current observation (step 2):
	// obs2
}

func FuzzStepPrompt(f *testing.F) {
	f.Add("{task}{history}{observation}", "{step}{action}", 2)
	f.Add("{{x}} {step", "{observation:json}", 0)
	f.Fuzz(func(t *testing.T, step, hist string, k int) {
		p, err := template.NewStepPrompt(k, step, hist)
		if err != nil {
			return
		}
		msgs := p.Messages(played(3))
		if n := len(msgs); n == 0 || msgs[n-1].Role != pipeline.RoleUser {
			t.Fatalf("messages %+v", msgs)
		}
	})
}

// TestStepPromptImages: the prompt's images and the current observation's
// are sent after the rendered text; earlier observations' images are not.
func TestStepPromptImages(t *testing.T) {
	img := func(u string) pipeline.ContentPart {
		return pipeline.ContentPart{Type: pipeline.PartImage, ImageURL: u}
	}
	withImage := func(m pipeline.Message, u string) pipeline.Message {
		m.Parts = []pipeline.ContentPart{{Type: pipeline.PartText, Text: m.Content}, img(u)}
		return m
	}
	p, err := template.NewStepPrompt(1, "", "")
	if err != nil {
		t.Fatal(err)
	}
	r := played(2)
	r.Task.Messages[1] = withImage(r.Task.Messages[1], "data:task")
	r.Messages[1] = r.Task.Messages[1]
	r.Messages[2] = withImage(r.Messages[2], "data:obs0") // before the first action
	r.Messages[6] = withImage(r.Messages[6], "data:obs2") // the current observation
	tests := []struct {
		steps int
		want  []string
	}{
		{0, []string{"data:task", "data:obs0"}},
		{1, []string{"data:task"}},
		{2, []string{"data:task", "data:obs2"}},
	}
	for _, tt := range tests {
		rr := *r
		rr.Messages = r.Messages[:3+2*tt.steps]
		msgs := p.Messages(&rr)
		u := msgs[len(msgs)-1]
		if len(u.Parts) != 1+len(tt.want) || u.Parts[0].Type != pipeline.PartText || u.Parts[0].Text != u.Content {
			t.Fatalf("steps %d: parts %+v", tt.steps, u.Parts)
		}
		for i, w := range tt.want {
			if p := u.Parts[1+i]; p.Type != pipeline.PartImage || p.ImageURL != w {
				t.Errorf("steps %d: part %d %+v, want %s", tt.steps, 1+i, p, w)
			}
		}
	}
	// Text-only rollouts keep text-only requests.
	if m := p.Messages(played(2)); m[len(m)-1].Parts != nil {
		t.Fatalf("parts %+v", m[len(m)-1].Parts)
	}
}
