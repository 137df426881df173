// Package report writes the HTML report of a run's output: one
// self-contained file (no CDN, no network: the ECharts library is inlined)
// with charts of the reward distribution, pass@k for every k, per-task
// solve rates, token and turn lengths, finish reasons, errors by class,
// keep rate and throughput over time, a per-environment breakdown, and a
// browsable sample of trajectories (messages, tool calls, and the token
// view coloured by loss mask).
//
// It reads the committed Parquet files in three passes, none of which
// holds more than one record batch:
//
//  1. runner/analyze.Aggregate: the run's metrics, as `trajflow stats`
//     gives them, and the tasks by (scored, correct) counts, from which
//     pass@k at every k and the per-task solve rates follow;
//  2. a pass over light columns only (env, status, error class, reward,
//     tokens, turns, finish reason, kept, total_ms): fixed-size histograms,
//     bounded count maps, per-file commit statistics, and a reservoir
//     choosing at most Options.Samples rows to show;
//  3. the files holding a chosen row, read whole one batch at a time, each
//     chosen row decoded with schema.Rollouts.
//
// Charts are built with github.com/go-echarts/go-echarts/v2 and rendered
// as snippets into the page; echarts.min.js (Apache ECharts 5.6.0,
// Apache-2.0, from the npm package "echarts") is embedded in the binary
// and inlined into every report.
package report
