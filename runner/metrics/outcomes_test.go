package metrics

import (
	"reflect"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

func TestTaskOutcomes(t *testing.T) {
	ok, er := pipeline.StatusOK, pipeline.StatusError
	rows := []*pipeline.Rollout{
		// task 0: 3 scored, 1 correct (the error row is not scored)
		row(0, 0, ok, 1, acc(1)), row(0, 0, ok, 0, acc(0)), row(0, 0, ok, 0, acc(0)), row(0, 0, er, 0, nil),
		// task 1: 3 scored, 1 correct
		row(1, 0, ok, 0, acc(0)), row(1, 0, ok, 1, acc(1)), row(1, 0, ok, 0, acc(0)),
		// task 2: 2 scored over two attempts, both correct
		row(2, 0, ok, 1, acc(1)), row(2, 1, ok, 1, acc(1)),
		// task 3: nothing scored
		row(3, 0, er, 0, nil),
	}
	want := []TaskOutcome{{N: 2, C: 2, Tasks: 1}, {N: 3, C: 1, Tasks: 2}}
	for _, contiguous := range []bool{false, true} {
		a := NewWithOptions(Options{Contiguous: contiguous})
		for _, r := range rows {
			a.Add(r)
		}
		if got := a.TaskOutcomes(); !reflect.DeepEqual(got, want) {
			t.Errorf("contiguous=%v: TaskOutcomes = %+v, want %+v", contiguous, got, want)
		}
		// Result's at-k entries are AtKOf over the same outcomes.
		for _, at := range a.Result().AtK {
			if got := AtKOf(want, at.K); got != at {
				t.Errorf("contiguous=%v: AtKOf(k=%d) = %+v, Result has %+v", contiguous, at.K, got, at)
			}
		}
	}
}

func TestAtKOf(t *testing.T) {
	outcomes := []TaskOutcome{{N: 2, C: 2, Tasks: 1}, {N: 3, C: 1, Tasks: 2}}
	tests := []struct {
		k               int
		tasks           int64
		pass, hat, mean float64
	}{
		{1, 3, (1 + 2*(1.0/3)) / 3, (1 + 2*(1.0/3)) / 3, (1 + 2*(1.0/3)) / 3},
		{2, 3, (1 + 2*(1-1.0/3)) / 3, 1.0 / 3, (1 + 2*(1.0/3)) / 3},
		{3, 2, 1, 0, 1.0 / 3}, // only the tasks with 3 samples
		{4, 0, 0, 0, 0},
		{0, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		got := AtKOf(outcomes, tt.k)
		if got.K != tt.k || got.Tasks != tt.tasks || !near(got.PassAtK, tt.pass) || !near(got.PassHatK, tt.hat) || !near(got.MeanAtK, tt.mean) {
			t.Errorf("AtKOf(k=%d) = %+v, want tasks %d pass %v hat %v mean %v", tt.k, got, tt.tasks, tt.pass, tt.hat, tt.mean)
		}
	}
}

func TestOptionsIsCorrect(t *testing.T) {
	tests := []struct {
		name   string
		opts   Options
		reward float64
		m      map[string]float64
		want   bool
	}{
		{"acc decides", Options{}, 0, acc(1), true},
		{"acc over reward", Options{}, 1, acc(0), false},
		{"no acc: reward", Options{}, 0.5, nil, true},
		{"no acc: zero reward", Options{}, 0, nil, false},
		{"use reward", Options{UseReward: true}, 0, acc(1), false},
		{"threshold", Options{Threshold: 0.5}, 0, acc(0.5), false},
		{"other metric", Options{Metric: "pass"}, 0, map[string]float64{"pass": 1}, true},
	}
	for _, tt := range tests {
		r := &pipeline.Rollout{Reward: tt.reward, Metrics: tt.m}
		if got := tt.opts.IsCorrect(r); got != tt.want {
			t.Errorf("%s: IsCorrect = %v, want %v", tt.name, got, tt.want)
		}
	}
}
