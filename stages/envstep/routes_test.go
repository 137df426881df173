package envstep_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/envstep"
)

// namedEnv rewards 1 in the env named "one", 2 in "two", and never ends.
type namedEnv struct{ reward float64 }

func (e namedEnv) Reset(context.Context, *pipeline.Rollout) (*envs.Reset, error) { return nil, nil }
func (e namedEnv) Step(context.Context, *pipeline.Rollout, pipeline.Message) (*envs.Step, error) {
	return &envs.Step{Reward: e.reward}, nil
}

func TestRouted(t *testing.T) {
	s := envstep.NewRouted([]envstep.Route{
		{Name: "one", Env: namedEnv{1}, Limits: envstep.Limits{MaxTurns: 1, Timeout: time.Second}, Concurrency: 1},
		{Name: "two", Env: namedEnv{2}, Limits: envstep.Limits{MaxTurns: 3}},
	})
	for _, tc := range []struct {
		env     string
		reward  float64
		done    bool
		timeout time.Duration
		err     string
	}{
		{env: "one", reward: 1, done: true, timeout: time.Second},
		{env: "two", reward: 2, done: false},
		{env: "three", done: true, err: `no route "three"`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			r := after(1, "x")
			r.Env = tc.env
			if err := s.Reset(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if tc.err != "" {
				if !strings.Contains(r.Error, tc.err) || r.Status != pipeline.StatusError {
					t.Fatalf("status %s error %q, want %q", r.Status, r.Error, tc.err)
				}
				return
			}
			done, err := s.Step(context.Background(), r)
			if err != nil || done != tc.done || r.Reward != tc.reward || r.Env != tc.env {
				t.Fatalf("done %v err %v reward %v env %q", done, err, r.Reward, r.Env)
			}
			if s.Timeout(r) != tc.timeout {
				t.Errorf("timeout %v", s.Timeout(r))
			}
		})
	}
}

func TestRouteOf(t *testing.T) {
	routes := map[string]*envstep.Config{"math": {}, "quiz": {}}
	for _, tc := range []struct {
		name   string
		field  string
		def    string
		fields map[string]any
		want   string
		err    string
	}{
		{name: "task_name first", fields: map[string]any{"task_name": "math", "agent_ref": map[string]any{"name": "quiz"}}, want: "math"},
		{name: "agent_ref by default", fields: map[string]any{"agent_ref": map[string]any{"name": "quiz"}}, want: "quiz"},
		{name: "route_field", field: "agent_ref.name", fields: map[string]any{"task_name": "x", "agent_ref": map[string]any{"name": "quiz"}}, want: "quiz"},
		{name: "unknown value", field: "agent_ref.name", fields: map[string]any{"agent_ref": map[string]any{"name": "chess"}}, err: `agent_ref.name "chess" has no route (routes: math, quiz)`},
		{name: "missing", fields: map[string]any{}, err: "the row has no task_name or agent_ref.name to choose its environment by (routes: math, quiz; env.default_route names one"},
		{name: "not a name", field: "kind", fields: map[string]any{"kind": []any{}}, err: "field kind is a []interface {}"},
		// Gym's +agent_name: the route of rows without agent_ref.
		{name: "default route", def: "quiz", fields: map[string]any{}, want: "quiz"},
		{name: "default route, row's own", def: "quiz", fields: map[string]any{"agent_ref": map[string]any{"name": "math"}}, want: "math"},
		{name: "default route, unknown value", def: "quiz", fields: map[string]any{"agent_ref": map[string]any{"name": "chess"}}, err: `"chess" has no route`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := envstep.Config{RouteField: tc.field, DefaultRoute: tc.def, Routes: routes}
			got, err := c.RouteOf(tc.fields)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestRouteDefaults(t *testing.T) {
	c := envstep.Config{MaxTurns: 3, Concurrency: 8, Routes: map[string]*envstep.Config{"math": {}, "quiz": {Name: "subprocess", MaxTurns: 5, Concurrency: 2}}}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	m, q := c.Routes["math"], c.Routes["quiz"]
	if m.Name != "math" || m.MaxTurns != 3 || m.Concurrency != 8 || q.MaxTurns != 5 || q.Concurrency != 2 {
		t.Errorf("math %+v quiz %+v", m, q)
	}
	if c.TotalConcurrency() != 10 || c.Name != "" {
		t.Errorf("total concurrency %d, name %q", c.TotalConcurrency(), c.Name)
	}
}

// A config's routes choose each task's route, bound each trajectory by
// its route's max_seq_len, and give the Stepper each route's environment
// and limits; without routes there is one environment and no per-route
// bound.
func TestFromConfig(t *testing.T) {
	routed := envstep.Config{MaxSeqLen: 50, RouteField: "kind", Routes: map[string]*envstep.Config{
		"one": {MaxSeqLen: 10, Timeout: pipeline.Duration(time.Second)}, "two": {},
	}}
	routed.SetDefaults()
	single := envstep.Config{MaxSeqLen: 30}
	single.SetDefaults()
	envOf := func(route string) envs.Env { return namedEnv{map[string]float64{"one": 1, "two": 2, "math": 3}[route]} }
	for _, tc := range []struct {
		name    string
		c       *envstep.Config
		fields  map[string]any
		route   string
		err     string
		seqLen  int // SeqLenOf's: the route's, or the section's
		reward  float64
		timeout time.Duration
	}{
		{name: "route one", c: &routed, fields: map[string]any{"kind": "one"}, route: "one", seqLen: 10, reward: 1, timeout: time.Second},
		{name: "route two takes the section's", c: &routed, fields: map[string]any{"kind": "two"}, route: "two", seqLen: 50, reward: 2},
		{name: "no route", c: &routed, fields: map[string]any{"kind": "three"}, err: `t.jsonl:3: env route: kind "three" has no route (routes: one, two)`},
		{name: "single", c: &single, fields: map[string]any{"kind": "one"}, route: "", seqLen: 30, reward: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := &pipeline.Task{Source: "t.jsonl:3", Fields: tc.fields}
			err := tc.c.RouteTask(task)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("RouteTask: %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || task.Env != tc.route {
				t.Fatalf("RouteTask: route %q, %v; want %q", task.Env, err, tc.route)
			}
			r := &pipeline.Rollout{Task: task, Env: task.Env, Messages: []pipeline.Message{{Role: pipeline.RoleAssistant, Content: "x"}}}
			s := envstep.FromConfig(tc.c, envOf)
			if got := s.Timeout(r); got != tc.timeout {
				t.Errorf("Stepper.Timeout %v, want %v", got, tc.timeout)
			}
			of := tc.c.SeqLenOf()
			if of == nil || of(r) != tc.seqLen {
				t.Fatalf("SeqLenOf gives no bound, or not %d", tc.seqLen)
			}
			if _, err := s.Step(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if r.Reward != tc.reward {
				t.Errorf("reward %v: stepped by the wrong environment, want %v", r.Reward, tc.reward)
			}
		})
	}
}

func TestDefaultRouteErrors(t *testing.T) {
	for _, tc := range []struct {
		c    envstep.Config
		want string
	}{
		{envstep.Config{Name: "math", DefaultRoute: "math"}, "default_route: needs routes"},
		{envstep.Config{DefaultRoute: "chess", Routes: map[string]*envstep.Config{"math": {}}}, `default_route: "chess" is not a route (routes: math)`},
		{envstep.Config{Routes: map[string]*envstep.Config{"math": {DefaultRoute: "math"}}}, "routes.math.default_route: belongs to the env section"},
	} {
		tc.c.SetDefaults()
		if err := tc.c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.c, err, tc.want)
		}
	}
}
