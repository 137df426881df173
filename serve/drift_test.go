package serve_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/serve/client"
)

// f32 is the raw ack body (client.ContentTypeF32) of rows.
func f32(rows ...[]float32) []byte {
	var b []byte
	for _, row := range rows {
		for _, v := range row {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	return b
}

// stepLogprobs is the engine's logprobs of a step's generated tokens
// (loss_mask 1), per row in the step's order, as an ack sends them back.
func stepLogprobs(t *testing.T, st *client.Step) [][]float32 {
	t.Helper()
	var out [][]float32
	for _, rec := range st.Records {
		sc := rec.Schema()
		mask := rec.Column(sc.FieldIndices(schema.ColumnName(schema.ColLossMask))[0]).(*array.List)
		lps := rec.Column(sc.FieldIndices(schema.ColumnName(schema.ColResponseLogprobs))[0]).(*array.List)
		mv, lv := mask.ListValues().(*array.Int8), lps.ListValues().(*array.Float32)
		for i := range int(rec.NumRows()) {
			row := []float32{}
			from, to := mask.ValueOffsets(i)
			lfrom, _ := lps.ValueOffsets(i)
			for j := from; j < to; j++ {
				if mv.Value(int(j)) == 1 {
					row = append(row, lv.Value(int(lfrom+j-from)))
				}
			}
			out = append(out, row)
		}
	}
	return out
}

// TestServeDriftFromAck: a trainer's ack may carry its own logprobs of
// the step's generated tokens, raw (the Go client's AckLogprobs) or as
// JSON. Equal to the engine's, the drift is 0; a known offset comes back
// as that offset, in the step and at the lag (versions behind the
// trainer's) of its tokens; thirteen malformed bodies (ten JSON, three
// raw) are each a 400 naming the problem and change nothing (the step
// stays unacknowledged, no drift recorded). The status and /metrics show
// it.
func TestServeDriftFromAck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := start(t, testConfig(t, t.TempDir(), "run.metrics_addr="+addr), serve.Options{})
	c := client.New(s.url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	step, err := c.Next(ctx, 2, client.FormatArrow)
	if err != nil {
		t.Fatal(err)
	}
	exact := stepLogprobs(t, step)
	step.Release()
	tokens := 0
	for _, row := range exact {
		tokens += len(row)
	}
	if tokens == 0 {
		t.Fatal("the step has no generated tokens with logprobs")
	}
	if err := c.SetPolicy(ctx, 1); err != nil {
		t.Fatal(err)
	}
	n := step.Number
	nums := func(rows [][]float32) string {
		var b strings.Builder
		b.WriteString("[")
		for i, row := range rows {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("[")
			for j, v := range row {
				if j > 0 {
					b.WriteString(",")
				}
				fmt.Fprint(&b, v)
			}
			b.WriteString("]")
		}
		return b.String() + "]"
	}
	short := append([][]float32{exact[0][:len(exact[0])-1]}, exact[1:]...)
	nan := append([][]float32{append([]float32{float32(math.NaN())}, exact[0][1:]...)}, exact[1:]...)
	const js, raw = "application/json", client.ContentTypeF32
	for _, tt := range []struct{ name, contentType, body, want string }{
		{"too few rows", js, `{"logprobs": ` + nums(exact[1:]) + `}`, "rows, the step's answer holds"},
		{"a row short", js, `{"logprobs": ` + nums(short) + `}`, "logprobs[0]:"},
		{"wrong step", js, fmt.Sprintf(`{"step": %d, "logprobs": %s}`, n+1, nums(exact)), "the body is for step"},
		{"both forms", js, `{"logprobs": [[-1]], "logprobs_f32": [""]}`, "not both"},
		{"neither", js, `{"step": 1}`, "missing"},
		{"unknown field", js, `{"logprobs": [[-1]], "lp": 1}`, "unknown field"},
		{"positive", js, `{"logprobs": [[0.7]]}`, "is not a logprob"},
		{"NaN", js, `{"logprobs_f32": ["AADAfw=="]}`, "is not a logprob"},
		{"bad base64", js, `{"logprobs_f32": ["%%%"]}`, "base64"},
		{"not JSON", js, `logprobs=1`, "not JSON"},
		{"raw, a token short", raw, string(f32(short...)), fmt.Sprintf("have %d generated tokens", tokens)},
		{"raw, not whole floats", raw, string(f32(exact...)) + "x", "one little-endian float32 a token"},
		{"raw NaN", raw, string(f32(nan...)), "body[0][0]: NaN is not a logprob"},
	} {
		resp, err := http.Post(fmt.Sprintf("%s/v1/steps/%d/ack", s.url, n), tt.contentType, strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tt.want) {
			t.Errorf("%s: %d %s, want 400 with %q", tt.name, resp.StatusCode, b, tt.want)
		}
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps.Acked != 0 || st.Drift != nil {
		t.Fatalf("after malformed acks: %d acked, drift %+v", st.Steps.Acked, st.Drift)
	}

	d, err := c.AckLogprobs(ctx, n, 0, 0, exact)
	if err != nil {
		t.Fatal(err)
	}
	if d == nil || d.Step != n || d.TrainerVersion != 1 || d.All.Tokens != int64(tokens) || d.All.MeanAbs != 0 || d.All.K3 != 0 ||
		d.ByLag["1"].Tokens != int64(tokens) || d.All.Sequences != int64(len(exact)) {
		t.Fatalf("equal logprobs: drift %+v", d)
	}

	// The next step, 0.1 below the engine on every token.
	step, err = c.Next(ctx, 2, client.FormatArrow)
	if err != nil {
		t.Fatal(err)
	}
	off := stepLogprobs(t, step)
	step.Release()
	var want float64
	var count int
	for _, row := range off {
		for j := range row {
			shifted := row[j] - 0.1
			want += float64(row[j]) - float64(shifted)
			count++
			row[j] = shifted
		}
	}
	want /= float64(count)
	// This one as JSON numbers, the form a trainer without the raw body
	// sends.
	resp, err := http.Post(fmt.Sprintf("%s/v1/steps/%d/ack", s.url, step.Number), js, strings.NewReader(`{"logprobs": `+nums(off)+`}`))
	if err != nil {
		t.Fatal(err)
	}
	var answer struct{ Drift *client.StepDrift }
	err = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if d = answer.Drift; err != nil || resp.StatusCode != http.StatusOK || d == nil {
		t.Fatalf("an ack with JSON logprobs: %d, %v, drift %+v", resp.StatusCode, err, d)
	}
	lag := d.ByLag["0"]
	if step.Versions[0] == 0 {
		lag = d.ByLag["1"]
	}
	if math.Abs(d.All.MeanAbs-want) > 1e-9 || math.Abs(lag.MeanAbs-want) > 1e-9 || d.All.Outside != 0 {
		t.Fatalf("an offset of -0.1: drift %+v, want mean |Δ| %v", d, want)
	}
	if st, err = c.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if st.Drift == nil || st.Drift.Steps != 2 || st.Drift.Last.Step != step.Number || math.Abs(st.Drift.Last.All.MeanAbs-want) > 1e-9 {
		t.Fatalf("status drift %+v", st.Drift)
	}
	if st.Steps.Acked != 2 {
		t.Fatalf("%d steps acknowledged, want 2", st.Steps.Acked)
	}
	resp, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{fmt.Sprintf("trajflow_serve_drift_step %d", step.Number), "trajflow_serve_drift_mean_abs{lag=", "trajflow_serve_drift_k3{lag=", "trajflow_serve_drift_outside_share{lag="} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
