// Package runstats follows a run: its counters (Counters), its progress
// (Snapshot, the progress line, Options.Progress), the endpoints' own
// metrics, its Prometheus endpoint (run.metrics_addr), its cost
// (generate.price), and at the end its summary (Summary) and metrics
// files (metrics.json, its NeMo Gym layout, the environments' aggregate
// metrics).
package runstats
