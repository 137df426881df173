package serve

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"mime"
	"net/http"
	"slices"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve/client"
)

// MaxAckBody is the largest ack body: a trainer's logprobs for a step's
// generated tokens (about 5.4 bytes a token in logprobs_f32: some 12
// million tokens).
const MaxAckBody = 64 << 20

// DefaultDriftRatio is the c of the drift's outside share: the share of
// tokens whose ratio π_trainer/π_engine lies outside [1/c, c].
const DefaultDriftRatio = 2.0

// AckBody is the body an ack may carry: the trainer's own logprobs of
// the step's generated tokens, per row in the step's row order (the
// rank's slice for a rank's ack), each row's in its token order (the
// positions of the response whose loss_mask is 1), as Logprobs (JSON
// numbers) or LogprobsF32 (per row, the little-endian float32 values in
// standard base64). Step, when set, must be the step acknowledged.
type AckBody struct {
	Step        *int64      `json:"step,omitempty"`
	Logprobs    [][]float64 `json:"logprobs,omitempty"`
	LogprobsF32 []string    `json:"logprobs_f32,omitempty"`
}

// ParseAckBody reads an ack's body: nil rows for an empty one (an ack
// without drift), and the field they came in (logprobs or logprobs_f32).
// Every problem is a *ParamError naming the field (and the row and
// token): unknown keys, both forms or neither, a step other than n, a
// value that is not a finite logprob (≤ 0), base64 that is not whole
// float32 values.
func ParseAckBody(b []byte, n int64) (rows [][]float32, field string, perr *ParamError) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, "", nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var body AckBody
	if err := dec.Decode(&body); err != nil {
		return nil, "", bodyError(err, `{"logprobs": [[…], …]} or {"logprobs_f32": ["base64", …]}`)
	}
	if dec.More() {
		return nil, "", &ParamError{"body", "body: one JSON object, not several"}
	}
	if body.Step != nil && *body.Step != n {
		return nil, "", &ParamError{"step", fmt.Sprintf("step: the body is for step %d, the ack for step %d", *body.Step, n)}
	}
	switch {
	case body.Logprobs != nil && body.LogprobsF32 != nil:
		return nil, "", &ParamError{"logprobs", "logprobs: give logprobs or logprobs_f32, not both"}
	case body.Logprobs == nil && body.LogprobsF32 == nil:
		return nil, "", &ParamError{"logprobs", "logprobs: missing (logprobs or logprobs_f32, one list a row)"}
	}
	if body.Logprobs != nil {
		rows = make([][]float32, len(body.Logprobs))
		for i, row := range body.Logprobs {
			rows[i] = make([]float32, len(row))
			for j, v := range row {
				rows[i][j] = float32(v)
			}
		}
	} else {
		rows = make([][]float32, len(body.LogprobsF32))
		for i, s := range body.LogprobsF32 {
			raw, err := base64.StdEncoding.DecodeString(s)
			if err != nil || len(raw)%4 != 0 {
				return nil, "", &ParamError{"logprobs_f32", fmt.Sprintf("logprobs_f32[%d]: want standard base64 of little-endian float32 values", i)}
			}
			rows[i] = make([]float32, len(raw)/4)
			for j := range rows[i] {
				rows[i][j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
			}
		}
	}
	field = "logprobs"
	if body.LogprobsF32 != nil {
		field = "logprobs_f32"
	}
	if perr := checkLogprobs(rows, field); perr != nil {
		return nil, "", perr
	}
	return rows, field, nil
}

// isF32 reports whether a Content-Type names the raw ack body.
func isF32(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == client.ContentTypeF32
}

// ParseAckF32 reads a raw ack body (client.ContentTypeF32) for rows of counts[i]
// generated tokens each. A body that is not 4 bytes a token of them all,
// or a value that is not a finite logprob (≤ 0), is a *ParamError
// naming the body (and the row and token).
func ParseAckF32(b []byte, counts []int) ([][]float32, *ParamError) {
	total := 0
	for _, c := range counts {
		total += c
	}
	if len(b) != 4*total {
		return nil, &ParamError{"body", fmt.Sprintf("body: %d bytes, the %d rows answered have %d generated tokens (loss_mask 1): want %d bytes, one little-endian float32 a token", len(b), len(counts), total, 4*total)}
	}
	all := make([]float32, total)
	for j := range all {
		all[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
	}
	rows := make([][]float32, len(counts))
	for i, c := range counts {
		rows[i], all = all[:c:c], all[c:]
	}
	if perr := checkLogprobs(rows, "body"); perr != nil {
		return nil, perr
	}
	return rows, nil
}

// checkLogprobs refuses a value that is not a finite logprob (at most 0,
// less a rounding), naming field, its row and its token.
func checkLogprobs(rows [][]float32, field string) *ParamError {
	for i, row := range rows {
		for j, v := range row {
			if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) || f > logprobSlack {
				return &ParamError{field, fmt.Sprintf("%s[%d][%d]: %v is not a logprob (finite, at most 0)", field, i, j, v)}
			}
		}
	}
	return nil
}

// logprobSlack is how far above 0 a logprob may round.
const logprobSlack = 1e-4

// driftStatus is the drift of the recorded steps that have one: how
// many, the latest (the highest step number), and all together by lag;
// nil when none has.
func driftStatus(steps []*stepState) *client.DriftStatus {
	var out *client.DriftStatus
	all := map[string]*client.DriftSums{}
	for _, st := range steps {
		if st.Drift == nil {
			continue
		}
		if out == nil {
			out = &client.DriftStatus{}
		}
		out.Steps++
		if st.Step >= out.Last.Step {
			out.Last = st.Drift.View(st.Step)
		}
		for k, a := range st.Drift.ByLag {
			if all[k] == nil {
				all[k] = &client.DriftSums{}
			}
			all[k].Merge(a)
		}
	}
	if out != nil {
		out.ByLag = map[string]client.Drift{}
		for k, a := range all {
			out.ByLag[k] = a.View()
		}
	}
	return out
}

// engineRows are the engine's side of a step's rows, in order: each
// row's logprobs of its generated tokens (loss_mask 1) and their policy
// versions.
type engineRows struct {
	logprobs [][]float32
	versions [][]int64
}

// addRecord adds the rows of rec (a step file's record, in the output
// schema).
func (e *engineRows) addRecord(rec arrow.Record) error {
	sc := rec.Schema()
	col := func(c int) arrow.Array {
		if idx := sc.FieldIndices(schema.ColumnName(c)); len(idx) == 1 {
			return rec.Column(idx[0])
		}
		return nil
	}
	prompt, ok1 := col(schema.ColPromptTokenIDs).(*array.List)
	mask, ok2 := col(schema.ColLossMask).(*array.List)
	lps, ok3 := col(schema.ColResponseLogprobs).(*array.List)
	minV, ok4 := col(schema.ColMinPolicyVersion).(*array.Int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return fmt.Errorf("the step's rows lack the training view (prompt_token_ids, loss_mask, response_logprobs, min_policy_version)")
	}
	maskV, okM := mask.ListValues().(*array.Int8)
	lpV, okL := lps.ListValues().(*array.Float32)
	if !okM || !okL {
		return fmt.Errorf("the step's loss_mask or response_logprobs have an unexpected type")
	}
	spans := spanOf(rec)
	for i := range int(rec.NumRows()) {
		var lp []float32
		var vs []int64
		if !mask.IsNull(i) && !lps.IsNull(i) {
			pFrom, pTo := prompt.ValueOffsets(i)
			base := int32(pTo - pFrom)
			mFrom, mTo := mask.ValueOffsets(i)
			lFrom, lTo := lps.ValueOffsets(i)
			if mTo-mFrom != lTo-lFrom {
				return fmt.Errorf("row %d: %d loss_mask values, %d response_logprobs", i, mTo-mFrom, lTo-lFrom)
			}
			rowSpans := spans(i)
			for j := int64(0); j < mTo-mFrom; j++ {
				if maskV.Value(int(mFrom+j)) != 1 {
					continue
				}
				lp = append(lp, lpV.Value(int(lFrom+j)))
				vs = append(vs, versionAt(rowSpans, base+int32(j), minV.Value(i)))
			}
		}
		e.logprobs = append(e.logprobs, lp)
		e.versions = append(e.versions, vs)
	}
	return nil
}

// span is one policy_versions span of a row.
type span struct {
	version    int64
	start, end int32
}

// spanOf returns, for a record, a function giving a row's spans (none
// where the record has no policy_versions column).
func spanOf(rec arrow.Record) func(i int) []span {
	idx := rec.Schema().FieldIndices(schema.ColumnName(schema.ColPolicyVersions))
	if len(idx) != 1 {
		return func(int) []span { return nil }
	}
	list, ok := rec.Column(idx[0]).(*array.List)
	if !ok {
		return func(int) []span { return nil }
	}
	st, ok := list.ListValues().(*array.Struct)
	if !ok {
		return func(int) []span { return nil }
	}
	v, ok1 := st.Field(schema.SpanVersion).(*array.Int64)
	s, ok2 := st.Field(schema.SpanStart).(*array.Int32)
	e, ok3 := st.Field(schema.SpanEnd).(*array.Int32)
	if !ok1 || !ok2 || !ok3 {
		return func(int) []span { return nil }
	}
	return func(i int) []span {
		if list.IsNull(i) {
			return nil
		}
		from, to := list.ValueOffsets(i)
		out := make([]span, 0, to-from)
		for j := int(from); j < int(to); j++ {
			out = append(out, span{v.Value(j), s.Value(j), e.Value(j)})
		}
		return out
	}
}

// versionAt is the version of the token at position p: its span's (the
// oldest that may have generated it), else the row's min_policy_version.
func versionAt(spans []span, p int32, fallback int64) int64 {
	i, found := slices.BinarySearchFunc(spans, p, func(s span, p int32) int {
		switch {
		case s.end <= p:
			return -1
		case s.start > p:
			return 1
		}
		return 0
	})
	if found {
		return spans[i].version
	}
	return fallback
}

// driftOf compares the trainer's logprobs of a step's rows with the
// engine's, the trainer at version trainer, under the ratio bound c. A
// count that does not match (rows, or a row's tokens) is a *ParamError
// naming the row.
func driftOf(engine engineRows, trainer [][]float32, version int64, c float64, field string) (*client.StepDriftRecord, *ParamError) {
	if len(trainer) != len(engine.logprobs) {
		return nil, &ParamError{field, fmt.Sprintf("%s: %d rows, the step's answer holds %d (one list a row, in its order; [] for a row without token ids)", field, len(trainer), len(engine.logprobs))}
	}
	d := &client.StepDriftRecord{Trainer: version, Ratio: c, ByLag: map[string]*client.DriftSums{}}
	logC := math.Log(c)
	for i, row := range trainer {
		eng := engine.logprobs[i]
		if len(row) != len(eng) {
			return nil, &ParamError{field, fmt.Sprintf("%s[%d]: %d values, the row has %d generated tokens (loss_mask 1)", field, i, len(row), len(eng))}
		}
		if len(row) == 0 {
			continue
		}
		var sum float64
		oldest := engine.versions[i][0]
		lagV, lag := oldest, d.Lag(version-oldest) // a row's tokens mostly share a version
		for j, t := range row {
			diff := float64(t) - float64(eng[j])
			sum += diff
			if v := engine.versions[i][j]; v != lagV {
				lagV, lag = v, d.Lag(version-v)
				oldest = min(oldest, v)
			}
			tok := client.NewDriftToken(diff, logC)
			d.All.AddToken(tok)
			lag.AddToken(tok)
		}
		seq := sum / float64(len(row))
		d.All.AddSeq(seq)
		d.Lag(version - oldest).AddSeq(seq)
	}
	return d, nil
}

// drift measures an ack body's logprobs (ParseAckBody) against the
// engine's of the rows the caller was answered (the step's, or rank's
// slice), the trainer at the policy version now; nil for an ack without
// logprobs. A bad body is answered with a 400 naming the problem (ok
// false), and nothing is recorded.
func (h *handler) drift(w http.ResponseWriter, r *http.Request, n int64, rank, world int, body []byte) (d *client.StepDriftRecord, ok bool) {
	raw := isF32(r.Header.Get("Content-Type"))
	var rows [][]float32
	field := "body"
	if !raw {
		var perr *ParamError
		if rows, field, perr = ParseAckBody(body, n); perr != nil {
			fail(w, http.StatusBadRequest, perr.Param, "%s", perr.Msg)
			return nil, false
		}
		if rows == nil {
			return nil, true
		}
	} else if len(body) == 0 {
		return nil, true
	}
	h.s.engine.use()
	st := h.s.led.stepOf(n)
	if st == nil {
		h.failWith(w, fmt.Errorf("step %d %w", n, errNeverServed))
		return nil, false
	}
	if world > 0 && st.World != world {
		h.failWith(w, fmt.Errorf("step %d was served to a world of %d ranks (0: whole), not %d: %w", n, st.World, world, errWorld))
		return nil, false
	}
	engine, err := h.s.engineRows(r.Context(), st, stepKeep(st, rank, world))
	if err != nil {
		failReason(w, http.StatusInternalServerError, client.ReasonInternal, "step %d: reading the engine's logprobs: %v", n, err)
		return nil, false
	}
	if raw {
		counts := make([]int, len(engine.logprobs))
		for i, row := range engine.logprobs {
			counts[i] = len(row)
		}
		var perr *ParamError
		if rows, perr = ParseAckF32(body, counts); perr != nil {
			fail(w, http.StatusBadRequest, perr.Param, "%s", perr.Msg)
			return nil, false
		}
	}
	d, perr := driftOf(engine, rows, h.s.led.version(), h.driftRatio, field)
	if perr != nil {
		fail(w, http.StatusBadRequest, perr.Param, "%s", perr.Msg)
		return nil, false
	}
	return d, true
}
