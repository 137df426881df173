package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve/client"
)

// served is what `trajflow serve` left in an output directory beside the
// rows: the drift of the steps acknowledged with the trainer's logprobs
// (served/state.json) and the evaluations (eval/v-NNNNNN/eval.json).
type served struct {
	drift []client.StepDrift
	evals []client.EvalResult
}

// readServed reads out's served state and evaluations; nothing when it
// has neither.
func readServed(out string) (*served, error) {
	var sv served
	b, err := os.ReadFile(filepath.Join(out, schema.ServedDir, schema.ServeStateFile))
	switch {
	case err == nil:
		var st struct {
			Steps []struct {
				Step  int64                   `json:"step"`
				Drift *client.StepDriftRecord `json:"drift"`
			} `json:"steps"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(out, schema.ServedDir, schema.ServeStateFile), err)
		}
		for _, s := range st.Steps {
			if s.Drift != nil {
				sv.drift = append(sv.drift, s.Drift.View(s.Step))
			}
		}
		sort.Slice(sv.drift, func(i, j int) bool { return sv.drift[i].Step < sv.drift[j].Step })
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(out, schema.EvalDir, "v-*", "eval.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	for _, p := range paths {
		var r client.EvalResult
		b, err := os.ReadFile(p)
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		sv.evals = append(sv.evals, r)
	}
	if len(sv.drift) == 0 && len(sv.evals) == 0 {
		return nil, nil
	}
	return &sv, nil
}

// serveCharts are the drift over steps, split by staleness (lag), and
// the evaluations by policy version; none for an output not served.
func (p *page) serveCharts() []chart {
	sv := p.served
	if sv == nil {
		return nil
	}
	var out []chart
	if len(sv.drift) > 0 {
		lags := map[string]bool{}
		for _, d := range sv.drift {
			for k := range d.ByLag {
				lags[k] = true
			}
		}
		keys := make([]string, 0, len(lags))
		for k := range lags {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			a, _ := strconv.Atoi(keys[i])
			b, _ := strconv.Atoi(keys[j])
			return a < b
		})
		var labels []string
		all := make([]any, len(sv.drift))
		byLag := make([][]any, len(keys))
		for i, d := range sv.drift {
			labels = append(labels, strconv.FormatInt(d.Step, 10))
			all[i] = round4(d.All.MeanAbs)
			for j, k := range keys {
				if v, ok := d.ByLag[k]; ok {
					byLag[j] = append(byLag[j], round4(v.MeanAbs))
				} else {
					byLag[j] = append(byLag[j], nil)
				}
			}
		}
		series := []barSeries{{"all tokens", all}}
		for j, k := range keys {
			series = append(series, barSeries{k + " versions behind", byLag[j]})
		}
		out = append(out, snippet("chart_drift", "Drift between the trainer and the engine",
			fmt.Sprintf("Mean |log π_trainer − log π_engine| over the generated tokens of each step acknowledged with the trainer's logprobs (%d steps), over all its tokens and by how many policy versions the tokens were behind the trainer's (docs/serve.md, \"Drift\").", len(sv.drift)),
			line("chart_drift", "step", "mean |Δ logprob|", labels, series...)))
	}
	if len(sv.evals) > 0 {
		var labels []string
		var p1, pk, mr []any
		k := 0
		for _, e := range sv.evals {
			labels = append(labels, strconv.FormatInt(e.Version, 10))
			p1, pk, mr = append(p1, round4(e.PassAt1)), append(pk, round4(e.PassAtK)), append(mr, round4(e.MeanReward))
			k = max(k, e.K)
		}
		out = append(out, snippet("chart_eval", "Evaluations by policy version",
			fmt.Sprintf("serve.eval's evaluations (%d), each pinned to one policy version: pass@1, pass@%d and the mean reward over the evaluation set (docs/serve.md, \"Evaluation\").", len(sv.evals), k),
			line("chart_eval", "policy version", "score", labels, barSeries{"pass@1", p1}, barSeries{fmt.Sprintf("pass@%d", k), pk}, barSeries{"mean reward", mr})))
	}
	return out
}
