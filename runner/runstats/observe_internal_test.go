package runstats

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trajflow/trajflow/gateway"
)

func TestParseServerMetrics(t *testing.T) {
	tests := []struct {
		name, text string
		want       ServerLoad
	}{
		{"vllm v1", "vllm:num_requests_running{engine=\"0\"} 4\nvllm:num_requests_running{engine=\"1\"} 2\nvllm:num_requests_waiting 5\nvllm:kv_cache_usage_perc 0.5\n",
			ServerLoad{OK: true, Running: 6, Waiting: 5, KVCache: 0.5}},
		{"older vllm", "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\nvllm:num_requests_running 1\n",
			ServerLoad{OK: true, Running: 1, KVCache: 0.25}},
		{"not vllm", "process_cpu_seconds_total 12\n", ServerLoad{}},
		{"bad samples left out", "vllm:num_requests_running NaN\nvllm:num_requests_running{engine=\"1\"} 3\nvllm:num_requests_waiting -2\nvllm:kv_cache_usage_perc +Inf\n",
			ServerLoad{OK: true, Running: 3}},
		{"not prometheus text", "<html>no</html>", ServerLoad{}},
		{"empty", "", ServerLoad{}},
	}
	for _, tt := range tests {
		if got := parseServerMetrics(strings.NewReader(tt.text)); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// FuzzParseServerMetrics: whatever a server's /metrics answers, the
// parser returns (no panic) a load of finite, non-negative figures.
func FuzzParseServerMetrics(f *testing.F) {
	f.Add("vllm:num_requests_running{engine=\"0\"} 4\nvllm:num_requests_waiting 5\nvllm:kv_cache_usage_perc 0.5\n")
	f.Add("# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total 1e300\nvllm:generation_tokens_total{a=\"b\"} 1e300\n")
	f.Add("vllm:num_requests_running NaN\n")
	f.Add("<html>no</html>")
	f.Fuzz(func(t *testing.T, text string) {
		l := parseServerMetrics(strings.NewReader(text))
		for name, v := range map[string]float64{"running": l.Running, "waiting": l.Waiting, "kv cache": l.KVCache, "prompt tokens": l.PromptTokens, "generation tokens": l.GenTokens} {
			if math.IsNaN(v) || v < 0 {
				t.Fatalf("%s %v from %q", name, v, text)
			}
		}
	})
}

// Prometheus shows the cost and its projection only for a run with a
// price.
func TestPrometheusCost(t *testing.T) {
	gather := func(s Snapshot) map[string]float64 {
		reg := prometheus.NewRegistry()
		reg.MustRegister(newPrometheus(func() Snapshot { return s }))
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				switch {
				case m.Counter != nil:
					got[f.GetName()] = m.Counter.GetValue()
				case m.Gauge != nil:
					got[f.GetName()] = m.Gauge.GetValue()
				}
			}
		}
		return got
	}
	got := gather(Snapshot{Priced: true, Cost: 1.5, GroupsFinished: 10, TaskLimit: 40})
	if got["trajflow_cost_total"] != 1.5 || got["trajflow_cost_projected"] != 6 {
		t.Fatalf("cost %v, projected %v; want 1.5 and 6", got["trajflow_cost_total"], got["trajflow_cost_projected"])
	}
	got = gather(Snapshot{Cost: 1.5, GroupsFinished: 10, TaskLimit: 40})
	if _, ok := got["trajflow_cost_total"]; ok {
		t.Fatal("a cost without a price")
	}
}

// Prometheus shows the agent gateway's counters for a run with one, and
// none for a run without.
func TestPrometheusGateway(t *testing.T) {
	gather := func(s Snapshot) map[string]float64 {
		reg := prometheus.NewRegistry()
		reg.MustRegister(newPrometheus(func() Snapshot { return s }))
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				name := f.GetName()
				for _, l := range m.GetLabel() {
					name += "{" + l.GetValue() + "}"
				}
				switch {
				case m.Counter != nil:
					got[name] = m.Counter.GetValue()
				case m.Gauge != nil:
					got[name] = m.Gauge.GetValue()
				}
			}
		}
		return got
	}
	g := &gateway.Stats{Calls: 7, Refused: 2, Errors: 1, SessionsOpened: 4, SessionsOpen: 3,
		AddedLatency: gateway.LatencySummary{Count: 6, Mean: 300 * time.Microsecond, P50: 250 * time.Microsecond, P99: 2 * time.Millisecond},
		ByAPI:        map[string]int64{gateway.AgentChat: 5, gateway.AgentMessages: 2}}
	got := gather(Snapshot{Gateway: g})
	want := map[string]float64{
		"trajflow_gateway_calls_total{chat}": 5, "trajflow_gateway_calls_total{messages}": 2,
		"trajflow_gateway_refused_total": 2, "trajflow_gateway_errors_total": 1,
		"trajflow_gateway_sessions_opened_total": 4, "trajflow_gateway_sessions_open": 3,
		"trajflow_gateway_added_latency_seconds{p50}": 0.00025, "trajflow_gateway_added_latency_seconds{p99}": 0.002,
		"trajflow_gateway_added_latency_seconds{mean}": 0.0003,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for k := range gather(Snapshot{}) {
		if strings.HasPrefix(k, "trajflow_gateway_") {
			t.Errorf("a run without a gateway shows %s", k)
		}
	}
}
