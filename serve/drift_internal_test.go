package serve

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/serve/client"
)

func f32b64(vs ...float32) string {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// An ack's body: empty (no drift), logprobs as numbers or as float32
// base64, one list a row; every malformed body is a ParamError naming
// the field and, for a value, the row and token.
func TestParseAckBody(t *testing.T) {
	nan := f32b64(-0.5, float32(math.NaN()))
	for _, tt := range []struct {
		name, body string
		rows       [][]float32
		param, msg string
	}{
		{"empty", "", nil, "", ""},
		{"spaces", " \n", nil, "", ""},
		{"numbers", `{"logprobs": [[-0.5, -1], []]}`, [][]float32{{-0.5, -1}, {}}, "", ""},
		{"f32", `{"step": 3, "logprobs_f32": ["` + f32b64(-0.25, 0) + `", ""]}`, [][]float32{{-0.25, 0}, {}}, "", ""},
		{"both", `{"logprobs": [[-1]], "logprobs_f32": [""]}`, nil, "logprobs", "not both"},
		{"neither", `{"step": 3}`, nil, "logprobs", "missing"},
		{"wrong step", `{"step": 4, "logprobs": [[-1]]}`, nil, "step", "for step 4"},
		{"unknown key", `{"logprob": [[-1]]}`, nil, "body", "unknown field"},
		{"not json", `logprobs=-1`, nil, "body", ""},
		{"two objects", `{"logprobs": [[-1]]} {}`, nil, "body", "not several"},
		{"string value", `{"logprobs": [["-1"]]}`, nil, "logprobs.0.0", "wrong type"},
		{"positive", `{"logprobs": [[-1, 0.5]]}`, nil, "logprobs", "logprobs[0][1]"},
		{"nan", `{"logprobs_f32": ["` + nan + `"]}`, nil, "logprobs_f32", "logprobs_f32[0][1]"},
		{"bad base64", `{"logprobs_f32": ["***"]}`, nil, "logprobs_f32", "logprobs_f32[0]"},
		{"not whole floats", `{"logprobs_f32": ["AAAAAA==", "AAA="]}`, nil, "logprobs_f32", "logprobs_f32[1]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rows, _, perr := ParseAckBody([]byte(tt.body), 3)
			if tt.param != "" {
				if perr == nil || perr.Param != tt.param || !strings.Contains(perr.Msg, tt.msg) {
					t.Fatalf("error %+v, want param %q with %q", perr, tt.param, tt.msg)
				}
				return
			}
			if perr != nil {
				t.Fatal(perr)
			}
			if len(rows) != len(tt.rows) {
				t.Fatalf("rows %v, want %v", rows, tt.rows)
			}
			for i := range rows {
				if len(rows[i]) != len(tt.rows[i]) {
					t.Fatalf("rows %v, want %v", rows, tt.rows)
				}
				for j := range rows[i] {
					if rows[i][j] != tt.rows[i][j] {
						t.Fatalf("rows %v, want %v", rows, tt.rows)
					}
				}
			}
		})
	}
}

func FuzzParseAckBody(f *testing.F) {
	f.Add([]byte(`{"logprobs": [[-0.5, -1], []]}`))
	f.Add([]byte(`{"step": 3, "logprobs_f32": ["` + f32b64(-0.25) + `"]}`))
	f.Add([]byte(`{"logprobs": [[1e400]]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, _, perr := ParseAckBody(b, 3)
		if perr != nil {
			if perr.Param == "" || perr.Msg == "" {
				t.Fatalf("an error naming nothing: %+v", perr)
			}
			return
		}
		for _, row := range rows {
			for _, v := range row {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || v > logprobSlack {
					t.Fatalf("accepted %v", v)
				}
			}
		}
	})
}

// A raw ack body (client.ContentTypeF32): split by the rows' token
// counts; a length that is not 4 bytes a token of them all, or a value
// that is not a finite logprob, is a ParamError naming the body (and the
// row and token).
func TestParseAckF32(t *testing.T) {
	raw := func(vs ...float32) []byte {
		b, _ := base64.StdEncoding.DecodeString(f32b64(vs...))
		return b
	}
	for _, tt := range []struct {
		name   string
		body   []byte
		counts []int
		rows   [][]float32
		msg    string
	}{
		{"rows", raw(-0.5, -1, -2), []int{2, 0, 1}, [][]float32{{-0.5, -1}, {}, {-2}}, ""},
		{"no tokens", nil, []int{0, 0}, [][]float32{{}, {}}, ""},
		{"a token short", raw(-0.5, -1), []int{2, 1}, nil, "8 bytes, the 2 rows answered have 3 generated tokens"},
		{"a token over", raw(-0.5, -1, -1, -1), []int{2, 1}, nil, "want 12 bytes"},
		{"not whole floats", append(raw(-0.5), 0), []int{1}, nil, "5 bytes"},
		{"NaN", raw(-0.5, float32(math.NaN())), []int{1, 1}, nil, "body[1][0]: NaN is not a logprob"},
		{"positive", raw(0.5), []int{1}, nil, "body[0][0]: 0.5"},
		{"infinite", raw(float32(math.Inf(-1))), []int{1}, nil, "body[0][0]: -Inf"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rows, perr := ParseAckF32(tt.body, tt.counts)
			if tt.msg != "" {
				if perr == nil || perr.Param != "body" || !strings.Contains(perr.Msg, tt.msg) {
					t.Fatalf("error %+v, want param body with %q", perr, tt.msg)
				}
				return
			}
			if perr != nil {
				t.Fatal(perr)
			}
			if fmt.Sprint(rows) != fmt.Sprint(tt.rows) {
				t.Fatalf("rows %v, want %v", rows, tt.rows)
			}
		})
	}
}

func FuzzParseAckF32(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0xbf, 0, 0, 0x80, 0xbf}, 1, 1)
	f.Add([]byte{0, 0, 0xc0, 0x7f}, 1, 0)
	f.Fuzz(func(t *testing.T, b []byte, a, c int) {
		if a < 0 || c < 0 || a+c > 1<<16 {
			return
		}
		rows, perr := ParseAckF32(b, []int{a, c})
		if perr != nil {
			if perr.Param != "body" || perr.Msg == "" {
				t.Fatalf("an error naming nothing: %+v", perr)
			}
			return
		}
		if len(b) != 4*(a+c) || len(rows) != 2 || len(rows[0]) != a || len(rows[1]) != c {
			t.Fatalf("%d bytes for %d and %d tokens: accepted as rows of %d and %d", len(b), a, c, len(rows[0]), len(rows[1]))
		}
		for _, row := range rows {
			for _, v := range row {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || v > logprobSlack {
					t.Fatalf("accepted %v", v)
				}
			}
		}
	})
}

// The drift: equal logprobs give 0; an offset on the tokens of one
// version comes back in that version's lag alone; k3, the outside share
// and the sequence ratios are the formulas' (computed here apart); a
// count that does not match names the row.
func TestDriftOf(t *testing.T) {
	engine := engineRows{
		logprobs: [][]float32{{-1, -2, -0.5, -0.25}, {}, {-3, -1}},
		versions: [][]int64{{4, 4, 5, 5}, {}, {5, 5}},
	}
	same := [][]float32{{-1, -2, -0.5, -0.25}, {}, {-3, -1}}
	d, perr := driftOf(engine, same, 5, 2, "logprobs")
	if perr != nil {
		t.Fatal(perr)
	}
	if v := d.All.View(); v.Tokens != 6 || v.MeanAbs != 0 || v.MaxAbs != 0 || v.K3 != 0 || v.Outside != 0 || v.Sequences != 2 || v.SeqRatioMin != 1 || v.SeqRatioMax != 1 {
		t.Fatalf("equal logprobs: %+v", v)
	}
	// The trainer (at version 5) is 0.5 above the engine on the tokens
	// of version 4 alone (lag 1).
	off := [][]float32{{-0.5, -1.5, -0.5, -0.25}, {}, {-3, -1}}
	d, perr = driftOf(engine, off, 5, 1.5, "logprobs")
	if perr != nil {
		t.Fatal(perr)
	}
	lag0, lag1 := d.ByLag["0"].View(), d.ByLag["1"].View()
	if lag0.Tokens != 4 || lag0.MeanAbs != 0 || lag0.Outside != 0 {
		t.Fatalf("lag 0: %+v", lag0)
	}
	k3 := math.Expm1(0.5) - 0.5
	if lag1.Tokens != 2 || lag1.MeanAbs != 0.5 || lag1.MaxAbs != 0.5 || math.Abs(lag1.K3-k3) > 1e-12 || lag1.Outside != 1 {
		t.Fatalf("lag 1: %+v, want 2 tokens, 0.5, 0.5, k3 %v, all outside [1/1.5, 1.5]", lag1, k3)
	}
	all := d.All.View()
	// Row 0's sequence log ratio: mean(0.5, 0.5, 0, 0) = 0.25, counted
	// at its oldest token's lag (1); row 2's 0.
	if all.Tokens != 6 || math.Abs(all.MeanAbs-1.0/6) > 1e-12 || math.Abs(all.SeqRatioMax-math.Exp(0.25)) > 1e-12 || all.SeqRatioMin != 1 ||
		math.Abs(all.SeqLogRatioStd-0.125) > 1e-12 || d.ByLag["1"].Seqs != 1 || d.ByLag["0"].Seqs != 1 {
		t.Fatalf("all: %+v; seqs by lag %d %d", all, d.ByLag["0"].Seqs, d.ByLag["1"].Seqs)
	}
	// Ranks' slices merge into the same sums.
	half := &client.StepDriftRecord{ByLag: map[string]*client.DriftSums{}}
	a, _ := driftOf(engineRows{logprobs: engine.logprobs[:1], versions: engine.versions[:1]}, off[:1], 5, 1.5, "logprobs")
	b, _ := driftOf(engineRows{logprobs: engine.logprobs[1:], versions: engine.versions[1:]}, off[1:], 5, 1.5, "logprobs")
	half.Merge(a)
	half.Merge(b)
	if half.All.View() != all {
		t.Fatalf("merged %+v, whole %+v", half.All.View(), all)
	}
	for _, tt := range []struct {
		rows [][]float32
		msg  string
	}{
		{same[:2], "2 rows, the step's answer holds 3"},
		{[][]float32{{-1}, {}, {-3, -1}}, "logprobs[0]: 1 values, the row has 4"},
		{[][]float32{same[0], {-1}, same[2]}, "logprobs[1]: 1 values, the row has 0"},
	} {
		if _, perr := driftOf(engine, tt.rows, 5, 2, "logprobs"); perr == nil || perr.Param != "logprobs" || !strings.Contains(perr.Msg, tt.msg) {
			t.Errorf("%v: %+v, want %q", tt.rows, perr, tt.msg)
		}
	}
}

// A token's version: its span's, else the row's min_policy_version.
func TestVersionAt(t *testing.T) {
	spans := []span{{2, 10, 14}, {3, 17, 20}}
	for _, tt := range []struct {
		p    int32
		want int64
	}{{9, 7}, {10, 2}, {13, 2}, {14, 7}, {17, 3}, {19, 3}, {20, 7}} {
		if got := versionAt(spans, tt.p, 7); got != tt.want {
			t.Errorf("position %d: %d, want %d", tt.p, got, tt.want)
		}
	}
}

// BenchmarkAckDrift: what an ack with the trainer's logprobs costs the
// service for a step of 64 groups of 8 rows (about 615 generated tokens a
// row): parsing the compact JSON body or the raw one, reading the
// engine's side back from the step's file, and the comparison; beside
// the Arrow answer of the same step, for scale.
func BenchmarkAckDrift(b *testing.B) {
	s, st, fresh := testStep(b, 64, 8, 8000)
	for _, g := range fresh {
		g.release()
	}
	ctx := context.Background()
	if err := s.written(ctx, st.Step); err != nil {
		b.Fatal(err)
	}
	engine, err := s.engineRows(ctx, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	rows := make([]string, len(engine.logprobs))
	tokens := 0
	for i, row := range engine.logprobs {
		rows[i] = f32b64(row...)
		tokens += len(row)
	}
	body := []byte(`{"logprobs_f32": ["` + strings.Join(rows, `", "`) + `"]}`)
	b.Logf("%d rows, %d tokens, a body of %d bytes", len(rows), tokens, len(body))
	b.Run("ack drift", func(b *testing.B) {
		for b.Loop() {
			trainer, _, perr := ParseAckBody(body, st.Step)
			if perr != nil {
				b.Fatal(perr)
			}
			eng, err := s.engineRows(ctx, st, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, perr := driftOf(eng, trainer, 1, 2, "logprobs_f32"); perr != nil {
				b.Fatal(perr)
			}
		}
	})
	b.Run("parse", func(b *testing.B) {
		for b.Loop() {
			if _, _, perr := ParseAckBody(body, st.Step); perr != nil {
				b.Fatal(perr)
			}
		}
	})
	raw := make([]byte, 0, 4*tokens)
	counts := make([]int, len(engine.logprobs))
	for i, row := range engine.logprobs {
		counts[i] = len(row)
		for _, v := range row {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
	}
	b.Run("parse raw", func(b *testing.B) {
		for b.Loop() {
			if _, perr := ParseAckF32(raw, counts); perr != nil {
				b.Fatal(perr)
			}
		}
	})
	b.Run("read engine", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.engineRows(ctx, st, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	trainer, _, _ := ParseAckBody(body, st.Step)
	b.Run("compare", func(b *testing.B) {
		for b.Loop() {
			if _, perr := driftOf(engine, trainer, 1, 2, "logprobs_f32"); perr != nil {
				b.Fatal(perr)
			}
		}
	})
	h := &handler{s: s, logf: b.Logf}
	b.Run("arrow answer", func(b *testing.B) {
		for b.Loop() {
			if err := h.answerStep(ctx, &discard{http.Header{}}, st.Step, FormatArrow, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
