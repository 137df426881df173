package client

import (
	"math"
	"strconv"
)

// DriftSums accumulate the drift of tokens and sequences: sums, so that
// the drifts of a step's ranks' slices add up exactly (as
// served/state.json keeps them with each step; View is what the status
// shows).
type DriftSums struct {
	Tokens  int64   `json:"tokens"`
	SumAbs  float64 `json:"sum_abs"`
	MaxAbs  float64 `json:"max_abs"`
	SumK3   float64 `json:"sum_k3"`
	Outside int64   `json:"outside"`
	// Seqs are the rows; SeqSum and SeqSumSq the sums of their
	// sequence-level log ratios (the mean of their tokens' log ratios),
	// SeqMin and SeqMax the smallest and largest.
	Seqs     int64   `json:"sequences"`
	SeqSum   float64 `json:"seq_sum"`
	SeqSumSq float64 `json:"seq_sum_sq"`
	SeqMin   float64 `json:"seq_min"`
	SeqMax   float64 `json:"seq_max"`
}

// Add adds one token's log ratio d = logπ_trainer − logπ_engine under
// the ratio bound c.
func (a *DriftSums) Add(d, c float64) { a.AddToken(NewDriftToken(d, math.Log(c))) }

// DriftToken is one token's terms of the sums, computed once for every
// sum the token goes into (a step's, its lag's).
type DriftToken struct {
	abs, k3 float64
	outside bool
}

// NewDriftToken is the terms of the log ratio d under the ratio bound
// e^logC.
func NewDriftToken(d, logC float64) DriftToken {
	// k3 (Schulman): r − 1 − log r, r = π_trainer/π_engine, an unbiased
	// estimate of KL(engine ‖ trainer) over tokens the engine sampled.
	abs := math.Abs(d)
	return DriftToken{abs: abs, k3: math.Expm1(d) - d, outside: abs > logC}
}

// AddToken adds one token's terms.
func (a *DriftSums) AddToken(t DriftToken) {
	a.Tokens++
	a.SumAbs += t.abs
	a.MaxAbs = max(a.MaxAbs, t.abs)
	a.SumK3 += t.k3
	if t.outside {
		a.Outside++
	}
}

// AddSeq adds one row's sequence-level log ratio.
func (a *DriftSums) AddSeq(l float64) {
	if a.Seqs == 0 {
		a.SeqMin, a.SeqMax = l, l
	}
	a.Seqs++
	a.SeqSum += l
	a.SeqSumSq += l * l
	a.SeqMin, a.SeqMax = min(a.SeqMin, l), max(a.SeqMax, l)
}

// Merge adds b to a.
func (a *DriftSums) Merge(b *DriftSums) {
	if b.Seqs > 0 {
		if a.Seqs == 0 {
			a.SeqMin, a.SeqMax = b.SeqMin, b.SeqMax
		}
		a.SeqMin, a.SeqMax = min(a.SeqMin, b.SeqMin), max(a.SeqMax, b.SeqMax)
	}
	a.Tokens += b.Tokens
	a.SumAbs += b.SumAbs
	a.MaxAbs = max(a.MaxAbs, b.MaxAbs)
	a.SumK3 += b.SumK3
	a.Outside += b.Outside
	a.Seqs += b.Seqs
	a.SeqSum += b.SeqSum
	a.SeqSumSq += b.SeqSumSq
}

// View is the accumulated drift as the status and the ack show it.
func (a *DriftSums) View() Drift {
	d := Drift{Tokens: a.Tokens, Sequences: a.Seqs, MaxAbs: a.MaxAbs}
	if a.Tokens > 0 {
		n := float64(a.Tokens)
		d.MeanAbs, d.K3, d.Outside = a.SumAbs/n, a.SumK3/n, float64(a.Outside)/n
	}
	if a.Seqs > 0 {
		n := float64(a.Seqs)
		mean := a.SeqSum / n
		d.SeqRatioMin, d.SeqRatioMax = math.Exp(a.SeqMin), math.Exp(a.SeqMax)
		d.SeqLogRatioStd = math.Sqrt(max(a.SeqSumSq/n-mean*mean, 0))
	}
	return d
}

// StepDriftRecord is a step's drift as served/state.json records it with
// its ack: by how many policy
// versions the tokens' are behind the trainer's (lag, as a string key
// for JSON), and over all. Ranks' acks merge into it.
type StepDriftRecord struct {
	// Trainer is the policy version when the (first) ack came: the
	// weights the trainer's logprobs are of.
	Trainer int64                 `json:"trainer_version"`
	Ratio   float64               `json:"ratio_bound"`
	All     DriftSums             `json:"all"`
	ByLag   map[string]*DriftSums `json:"by_lag"`
}

// Merge adds b (another rank's slice) to d.
func (d *StepDriftRecord) Merge(b *StepDriftRecord) {
	d.All.Merge(&b.All)
	for k, a := range b.ByLag {
		if d.ByLag[k] == nil {
			d.ByLag[k] = &DriftSums{}
		}
		d.ByLag[k].Merge(a)
	}
}

// View is d as the status and the ack show it.
func (d *StepDriftRecord) View(step int64) StepDrift {
	out := StepDrift{Step: step, TrainerVersion: d.Trainer, RatioBound: d.Ratio, All: d.All.View(), ByLag: map[string]Drift{}}
	for k, a := range d.ByLag {
		out.ByLag[k] = a.View()
	}
	return out
}

// Lag is the accumulator of tokens lag versions behind (0 for a token
// newer than the trainer's version).
func (d *StepDriftRecord) Lag(lag int64) *DriftSums {
	k := strconv.FormatInt(max(lag, 0), 10)
	a := d.ByLag[k]
	if a == nil {
		a = &DriftSums{}
		d.ByLag[k] = a
	}
	return a
}
