package httpenv

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/internal/gymcontract"
)

// TestGymBodiesValidateWithGymModels: every body trajflow posts to a
// resources server (/seed_session, tool calls, /verify, /aggregate_metrics)
// validates with Gym's models (internal/gymcontract, transcribed from
// Gym's source), whose responses_create_params forbid undeclared keys:
// with the config's parameters, a seed and repeat.add_seed on or off, no
// body is refused, and the row posted (what an agent's /run would get)
// validates as BaseRunRequest. The seed, when added, is in metadata.extra_body.
func TestGymBodiesValidateWithGymModels(t *testing.T) {
	models, err := gymcontract.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, addSeed := range []bool{false, true} {
		g := &gymResources{balance: map[string]int{}, ops: map[string]int{}, received: map[string][]map[string]any{}}
		h, rej := models.Gate(g)
		srv := httptest.NewServer(h)
		e := newEnv(t, Config{URL: srv.URL, Protocol: ProtocolNeMoGym})
		plain := map[string]any{"question": "Deposit 7.", "expected_answer": "7"}
		for i, row := range []map[string]any{gymRow, plain} {
			r := gymRollout(row, int64(i), 0)
			r.Seed, r.NoSeed, r.GymSeed = 1234+int64(i), false, addSeed
			r.ConfigParams = map[string]any{"temperature": 1.0, "max_tokens": 64, "top_p": 0.9, "reasoning_effort": "low"}
			drive(t, e, 4, r, call("c1", "deposit", `{"op": "c1", "amount": 3}`), call("c2", "deposit", `{"op": "c2", "amount": 4}`), answer("7"))
		}
		if _, err := e.Finish(context.Background()); err != nil {
			t.Fatal(err)
		}
		srv.Close()
		for _, err := range rej.Errors() {
			t.Errorf("add_seed %v: refused: %v", addSeed, err)
		}
		for _, p := range []string{"/seed_session", "/deposit", "/verify", "/aggregate_metrics"} {
			if rej.Seen(p) == 0 {
				t.Errorf("add_seed %v: nothing posted to %s", addSeed, p)
			}
		}
		// The body of /seed_session is the row as Gym's rollout
		// collection posts it to an agent's /run: it validates as
		// BaseRunRequest too.
		for _, b := range g.got("/seed_session") {
			raw, _ := json.Marshal(b)
			if err := models.Validate("BaseRunRequest", raw); err != nil {
				t.Errorf("add_seed %v: as an agent's /run body: %v", addSeed, err)
			}
		}
		v := g.got("/verify")
		if len(v) != 2 {
			t.Fatalf("%d verify bodies, want 2", len(v))
		}
		md, _ := v[0]["responses_create_params"].(map[string]any)["metadata"].(map[string]any)
		if got := md["extra_body"]; addSeed != (got == `{"seed":1234}`) {
			t.Errorf("add_seed %v: metadata.extra_body %v", addSeed, got)
		}
	}
}

// TestGymGateRefusesExtraKeys: the contract check fails a body with a key
// Gym forbids, as Gym answers it (422, extra_forbidden at its location).
func TestGymGateRefusesExtraKeys(t *testing.T) {
	models, err := gymcontract.Load()
	if err != nil {
		t.Fatal(err)
	}
	g := &gymResources{balance: map[string]int{}, ops: map[string]int{}, received: map[string][]map[string]any{}}
	h, rej := models.Gate(g)
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := srv.Client().Post(srv.URL+"/verify", "application/json", strings.NewReader(`{"responses_create_params":{"input":"hi","seed":3},"response":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	errs := rej.Errors()
	if res.StatusCode != 422 || len(errs) != 1 || !strings.Contains(errs[0].Error(), "body.responses_create_params.seed: extra_forbidden") {
		t.Fatalf("HTTP %d, refusals %v", res.StatusCode, errs)
	}
}
