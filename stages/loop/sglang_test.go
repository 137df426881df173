package loop_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/trajflow/trajflow/inference"
)

// recordNative records a /generate answer (SGLang's native API): the
// request's input_ids followed by the output_ids, under its
// sampling_params.sampling_seed.
func (rec *recorder) recordNative(cw *httptest.ResponseRecorder, body []byte) {
	if cw.Code != http.StatusOK {
		return
	}
	var req struct {
		InputIDs       []int32 `json:"input_ids"`
		SamplingParams struct {
			Seed *int64 `json:"sampling_seed"`
		} `json:"sampling_params"`
	}
	var resp struct {
		OutputIDs []int32 `json:"output_ids"`
	}
	if json.Unmarshal(body, &req) != nil || req.SamplingParams.Seed == nil || json.Unmarshal(cw.Body.Bytes(), &resp) != nil {
		return
	}
	rec.mu.Lock()
	rec.seqs[*req.SamplingParams.Seed] = append(rec.seqs[*req.SamplingParams.Seed], slices.Concat(req.InputIDs, resp.OutputIDs))
	rec.mu.Unlock()
}

// TestSGLangModeIsExact is TestTokensModeIsExact over SGLang's native
// /generate (generate.api: sglang): every request's input_ids and
// output_ids, as the server saw and produced them, are a prefix of the
// row, with no continuity break, in multi-turn runs with an environment.
func TestSGLangModeIsExact(t *testing.T) {
	for _, maxTokens := range []int{64, 1024} {
		t.Run(fmt.Sprint(maxTokens), func(t *testing.T) { tokensModeIsExact(t, inference.APISGLang, maxTokens) })
	}
}

// TestSGLangMaxSeqLenIsExact: with max_seq_len 600 no row is longer, the
// rows that reached the bound are the truncated ones, and every request
// the server saw is a prefix of its row.
func TestSGLangMaxSeqLenIsExact(t *testing.T) {
	out, seqs := runTokens(t, inference.APISGLang, 600, 200)
	hit := 0
	for _, r := range out {
		n := len(r.Tokens())
		if n > 600 || (n == 600) != r.Truncated {
			t.Fatalf("%s: %d tokens, truncated %v", r, n, r.Truncated)
		}
		if r.Truncated {
			hit++
		}
		if len(seqs[r.Seed]) != r.NumTurns {
			t.Fatalf("%s: %d requests recorded, %d turns", r, len(seqs[r.Seed]), r.NumTurns)
		}
		for i, q := range seqs[r.Seed] {
			if !isPrefix(q, r.Tokens()) {
				t.Fatalf("%s: request %d not a prefix", r, i)
			}
		}
	}
	if hit == 0 {
		t.Fatal("no row reached max_seq_len: the test does not exercise it")
	}
}
