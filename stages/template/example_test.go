package template_test

import (
	"encoding/json"
	"fmt"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/template"
)

func ExampleTemplate_Render() {
	tmpl, err := template.New(template.Config{
		System: "You are a careful {meta.subject} tutor.",
		User:   "Solve: {question}\nAnswer as {{\"answer\": ...}}.",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	task := &pipeline.Task{
		Source: "tasks.jsonl:1",
		Fields: map[string]any{"question": "2+2?", "meta": map[string]any{"subject": "math"}},
	}
	if err := tmpl.Render(task); err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range task.Messages {
		fmt.Printf("%s: %s\n", m.Role, m.Content)
	}

	task = &pipeline.Task{Source: "tasks.jsonl:2", Fields: map[string]any{"problem": json.Number("7")}}
	fmt.Println(tmpl.Render(task))
	// Output:
	// system: You are a careful math tutor.
	// user: Solve: 2+2?
	// Answer as {"answer": ...}.
	// tasks.jsonl:2: prompt.system: row has no field "meta.subject"
}
