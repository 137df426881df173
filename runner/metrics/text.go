package metrics

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteText writes m as a human-readable table.
func (m *Metrics) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }

	p("rows\t%d", m.Rows)
	p("status\t%s", counts(m.Status))
	p("scored rows\t%d\t(status ok or filtered)", m.ScoredRows)
	p("reward\tmean %.4f\tstd %.4f\tmin %.4g\tmax %.4g", m.Reward.Mean, m.Reward.Std, m.Reward.Min, m.Reward.Max)
	if m.RewardsSkipped > 0 {
		p("rewards skipped\t%d (not finite, or beyond ±%g)", m.RewardsSkipped, MaxReward)
	}
	judge := "reward"
	if m.Correctness.Metric != "" {
		judge = fmt.Sprintf("metric %q (else reward)", m.Correctness.Metric)
	}
	p("accuracy\t%.4f\t%d/%d correct\t%s > %g", m.Correctness.Accuracy, m.Correctness.Correct, m.ScoredRows, judge, m.Correctness.Threshold)
	p("tasks\t%d\tcomplete %d (%.4f)", m.Tasks, m.TasksComplete, m.TaskCompletion)
	p("groups\t%d\tkept %d\tdropped %d %s", m.Groups.Count, m.Groups.Kept, m.Groups.Dropped, counts(m.Groups.DroppedBy))
	p("")
	p("k\ttasks\tpass@k\tpass^k\tmean@k")
	for _, a := range m.AtK {
		p("%d\t%d\t%.4f\t%.4f\t%.4f", a.K, a.Tasks, a.PassAtK, a.PassHatK, a.MeanAtK)
	}
	p("")
	p("per sample\tmean\tp95\tmax\ttotal")
	dist := func(name string, d Dist) { p("%s\t%.2f\t%d\t%d\t%d", name, d.Mean, d.P95, d.Max, d.Total) }
	dist("prompt tokens", m.Tokens.Prompt)
	dist("completion tokens", m.Tokens.Completion)
	if m.Tokens.Env != nil {
		dist("env tokens", *m.Tokens.Env)
	} else {
		p("env tokens\tunknown\t\t\t\t(no token ids)")
	}
	dist("turns", m.Turns)
	dist("tool calls", m.ToolCalls)
	p("")
	p("natural termination rate\t%.4f", m.ScoredNaturalTerminationRate)
	p("truncation rate\t%.4f", m.ScoredTruncationRate)
	p("max turns rate\t%.4f", m.MaxTurnsRate)
	p("token continuity breaks\t%d", m.TokenContinuityBreaks)
	if c := m.Cost; c != nil {
		p("cost\t%s  (%d priced rows: %d prompt tokens, %d of them cached, %d completion tokens; %s)",
			FormatCost(c.Total), c.PricedRows, c.Billed.PromptTokens, c.Billed.CachedPromptTokens, c.Billed.CompletionTokens, c.Includes())
	}
	p("")
	p("NeMo RL (every row)\tnatural_termination_rate %.4f  truncation_rate %.4f  max_turns_reached_rate %.4f",
		m.NaturalTerminationRate, m.TruncationRate, m.MaxTurnsReachedRate)
	p("\tturns total %d  avg %.2f  max %d;  tokens per sample gen %s  env %s  total %s%s",
		m.TotalTurns, m.AvgTurnsPerSample, m.MaxTurnsPerSample,
		mean(m.MeanGenTokensPerSample), mean(m.MeanEnvTokensPerSample), mean(m.MeanTotalTokensPerSample),
		unknownNote(m.TokenCountsUnknown, m.Rows))
	if len(m.Envs) > 0 {
		p("")
		p("env\trows\tscored\treward\taccuracy\tturns\tnatural_term")
		for _, n := range slices.Sorted(maps.Keys(m.Envs)) {
			e := m.Envs[n]
			p("%s\t%d\t%d\t%.4f\t%.4f\t%.2f\t%.4f", cmp.Or(n, "(none)"), e.Rows, e.ScoredRows, e.Reward.Mean,
				e.Correctness.Accuracy, e.AvgTurnsPerSample, e.NaturalTerminationRate)
		}
	}
	return tw.Flush()
}

// counts formats a count map as "(a 1, b 2)", keys sorted; "" when empty.
func counts(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// mean formats a mean that may be unknown (nil).
func mean(v *float64) string {
	if v == nil {
		return "unknown"
	}
	return fmt.Sprintf("%.2f", *v)
}

// unknownNote says how many of rows had unknown training-view counts
// (left out of the means); "" when none.
func unknownNote(unknown, rows int64) string {
	if unknown == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of %d rows unknown: no token ids; their tokens are in prompt/completion tokens, the servers' usage)", unknown, rows)
}
