package jsonl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/sinks/jsonl"
	"github.com/trajflow/trajflow/stages/collate"
)

// liveGroup is a group as a run holds it: rollouts with a start time, a
// task with its parsed messages, tools and parameters (none of which the
// output's row holds but its input row), the config's parameters
// unredacted and a seed of the row's own.
func liveGroup() *pipeline.Group {
	g := pipelinetest.Group(7, 3, 300)
	task := &pipeline.Task{
		Index:  7,
		Source: "tasks.jsonl:8",
		Raw:    json.RawMessage(`{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"seed":3}`),
		Fields: map[string]any{"messages": []any{}, "seed": json.Number("3")},
		Params: map[string]any{"temperature": 0.1},
		Tools:  []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"f","parameters":{}}}`)},
	}
	for i, r := range g.Rollouts {
		r.Task = task
		r.Started = time.Date(2026, 11, 27, 6, 0, i, 0, time.UTC)
		r.ConfigParams = map[string]any{"api_key": "secret", "max_tokens": 64}
		r.GymSeed = i != 0
		r.Metrics = map[string]float64{"acc": 1, "invalid_actions": float64(i)}
	}
	return g
}

// badUTF8Group holds invalid UTF-8 in every string a line carries.
func badUTF8Group() *pipeline.Group {
	g := pipelinetest.Group(2, 2, 200)
	bad := "a\xff\xfeb\xc0"
	g.Rollouts[0].Task = &pipeline.Task{Index: 2, Raw: json.RawMessage(`{"q":"` + bad + `"}`)}
	g.Rollouts[1].Task = g.Rollouts[0].Task
	for _, r := range g.Rollouts {
		r.Model, r.Env, r.Error, r.ErrorClass, r.FinishReason, r.TrajID, r.RunID = bad, bad, bad, bad, "length"+bad, bad, bad
		r.Metrics = map[string]float64{bad: 1, "a\xfd\xfeb\xc0": 2, "ok": 3}
		r.Messages = append(r.Messages,
			pipeline.Message{Role: "assistant", Turn: 1, Content: "<think>" + bad + "</think>" + bad,
				ToolCalls: []pipeline.ToolCall{{ID: bad, Type: "function", Name: bad, Arguments: bad}}},
			pipeline.Message{Role: "tool", Turn: 1, ToolCallID: bad, Name: bad, Content: bad},
			pipeline.Message{Role: "user", Turn: 1, Content: bad, Parts: []pipeline.ContentPart{
				{Type: pipeline.PartText, Text: bad}, {Type: pipeline.PartImage, ImageURL: "data:" + bad}}})
	}
	return g
}

// sparseGroup has a nil rollout, one without a task, messages, metrics
// or turn rewards, and one with empty ones.
func sparseGroup() *pipeline.Group {
	return &pipeline.Group{Rollouts: []*pipeline.Rollout{
		nil,
		{GroupID: "g", TrajID: "t0", Status: pipeline.StatusError, Error: "boom"},
		{Task: &pipeline.Task{Index: 9}, GroupID: "g", TrajID: "t1", RolloutIndex: 1, Metrics: map[string]float64{}, TurnRewards: []float64{},
			Messages: []pipeline.Message{}},
	}}
}

// WriteGroups writes, byte for byte, the lines Write writes for the
// record collate makes of the same groups, whatever the rollouts hold
// beyond what the record keeps.
func TestWriteGroupsIsWriteOfTheRecord(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		groups  func() []*pipeline.Group
		params  map[string]any
		addSeed bool
	}{
		{"fixtures", func() []*pipeline.Group {
			return []*pipeline.Group{pipelinetest.Group(0, 3, 200), pipelinetest.Group(1, 3, 200)}
		}, nil, true},
		{"live rollouts, no seed added", func() []*pipeline.Group { return []*pipeline.Group{liveGroup()} },
			map[string]any{"api_key": "[redacted]", "max_tokens": 64, "reasoning_effort": "low"}, false},
		{"live rollouts, seeds added", func() []*pipeline.Group { return []*pipeline.Group{liveGroup()} }, nil, true},
		{"invalid UTF-8", func() []*pipeline.Group { return []*pipeline.Group{badUTF8Group()} }, nil, true},
		{"sparse rows", func() []*pipeline.Group { return []*pipeline.Group{sparseGroup(), pipelinetest.Group(4, 1, 64)} }, nil, false},
		{"no groups", func() []*pipeline.Group { return nil }, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer alloc.AssertSize(t, 0)
			var fromRecord, fromGroups bytes.Buffer
			wr, wg := jsonl.New(&fromRecord), jsonl.New(&fromGroups)
			wr.Overrides(tt.params, tt.addSeed)
			wg.Overrides(tt.params, tt.addSeed)
			c := collate.New(alloc, 1<<20)
			defer c.Release()
			gs := tt.groups()
			for _, g := range gs {
				if rec := c.Add(g); rec != nil {
					t.Fatal("collate handed out a record early")
				}
			}
			if rec := c.Flush(); rec != nil {
				err := wr.Write(ctx, rec)
				rec.Release()
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := wg.WriteGroups(ctx, gs); err != nil {
				t.Fatal(err)
			}
			for _, w := range []*jsonl.Writer{wr, wg} {
				if err := w.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// created_at is the rollout's start, which the record lacks
			// (0 there).
			for _, g := range gs {
				for _, r := range g.Rollouts {
					if r != nil && !r.Started.IsZero() && !strings.Contains(fromGroups.String(), fmt.Sprintf(`"created_at":%d,"id":"resp_%s"`, r.Started.Unix(), r.TrajID)) {
						t.Errorf("%s: no line with created_at %d (its start)", r.TrajID, r.Started.Unix())
					}
				}
			}
			groupLines := createdAt.ReplaceAllString(fromGroups.String(), `"created_at":0,`)
			if fromRecord.String() != groupLines {
				t.Errorf("lines differ:\nrecord:\n%s\ngroups:\n%s", fromRecord.String(), groupLines)
			}
			if len(gs) > 0 && fromGroups.Len() == 0 {
				t.Error("no lines")
			}
		})
	}
}

var createdAt = regexp.MustCompile(`"created_at":[0-9]+,`)

// WriteGroups leaves the rollouts as they were.
func TestWriteGroupsDoesNotChangeTheRollouts(t *testing.T) {
	g, want := badUTF8Group(), badUTF8Group()
	live, liveWant := liveGroup(), liveGroup()
	w := jsonl.New(&bytes.Buffer{})
	w.Overrides(map[string]any{"x": 1}, false)
	if err := w.WriteGroups(context.Background(), []*pipeline.Group{g, live}); err != nil {
		t.Fatal(err)
	}
	for i, pair := range [][2]*pipeline.Group{{g, want}, {live, liveWant}} {
		for k := range pair[0].Rollouts {
			got, _ := json.Marshal(pair[0].Rollouts[k])
			exp, _ := json.Marshal(pair[1].Rollouts[k])
			if !bytes.Equal(got, exp) || pair[0].Rollouts[k].Started != pair[1].Rollouts[k].Started ||
				pair[0].Rollouts[k].NoSeed != pair[1].Rollouts[k].NoSeed || pair[0].Rollouts[k].Task.Source != pair[1].Rollouts[k].Task.Source {
				t.Errorf("group %d rollout %d changed", i, k)
			}
		}
	}
}
