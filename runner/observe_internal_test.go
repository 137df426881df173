package runner

import (
	"strings"
	"testing"
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
		{"not prometheus text", "<html>no</html>", ServerLoad{}},
		{"empty", "", ServerLoad{}},
	}
	for _, tt := range tests {
		if got := parseServerMetrics(strings.NewReader(tt.text)); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
