package openai_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/pipeline"
)

// toy is a protocol of an engine the house does not know: its own path
// under the server's root, its own request and answer, its own abort by
// request id. It is the whole of what a new engine API needs: this type
// and the one registration line in init below (in the package, the line
// goes to protocols.go).
type toy struct{}

func init() { inference.RegisterProtocol(toy{}) }

const apiToy inference.API = "toy"

func (toy) API() inference.API { return apiToy }

func (toy) Caps() inference.Caps {
	return inference.Caps{Tokens: true, TokenAPI: apiToy, TokenPrompts: "the toy's /toy/run", AbortContinues: true}
}

func (toy) Call(req *inference.Request) (*openai.Call, error) {
	id := "toy-" + req.Sample
	body, err := json.Marshal(map[string]any{"ids": req.PromptTokenIDs, "budget": req.Params["max_tokens"], "id": id})
	if err != nil {
		return nil, err
	}
	return &openai.Call{
		Path: "/toy/run", Root: true, Body: body, ID: id,
		Hint: " (the toy API needs a toy server)", HintOn: []int{http.StatusNotFound},
		Decode: func(data []byte) (*inference.Response, error) {
			var w struct {
				Out  string  `json:"out"`
				IDs  []int32 `json:"out_ids"`
				Done string  `json:"done"`
			}
			if err := json.Unmarshal(data, &w); err != nil {
				return nil, err
			}
			return &inference.Response{
				Message:      pipeline.Message{Role: pipeline.RoleAssistant, Content: w.Out, TokenIDs: w.IDs},
				FinishReason: w.Done, PromptTokens: len(req.PromptTokenIDs), CompletionTokens: len(w.IDs),
			}, nil
		},
	}, nil
}

func (toy) AbortBodies(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = `{"cancel":"` + id + `"}`
	}
	return out
}

var _ openai.Protocol = toy{}

// A protocol registered in one file is carried by the real transport
// end to end: its path and body on the wire, a 429 with Retry-After
// retried on the next endpoint, its answer decoded, its requests in
// flight aborted by its own bodies, its hint on a 404; and every package
// that asks generate.api what it can do sees its capabilities.
func TestToyProtocolEndToEnd(t *testing.T) {
	if !apiToy.Valid() || !apiToy.Tokens() || apiToy.TokenAPI() != apiToy || apiToy.TokenPrompts() != "the toy's /toy/run" {
		t.Fatalf("toy: Valid %v, Tokens %v, TokenAPI %q, TokenPrompts %q", apiToy.Valid(), apiToy.Tokens(), apiToy.TokenAPI(), apiToy.TokenPrompts())
	}
	if !slices.Contains(inference.APIs(), apiToy) {
		t.Fatalf("APIs() = %v: no toy", inference.APIs())
	}
	var cfg inference.Config
	cfg.API = apiToy
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("generate.api: toy: %v", err)
	}

	var mu sync.Mutex
	var seen []string // "server path body"
	var aborts []string
	hold := make(chan struct{})
	mk := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			if r.URL.Path == "/abort_request" {
				aborts = append(aborts, name+" "+string(b))
				mu.Unlock()
				return
			}
			seen = append(seen, name+" "+r.URL.Path+" "+string(b))
			n := len(seen)
			mu.Unlock()
			switch {
			case r.URL.Path != "/toy/run":
				http.Error(w, `{"error":{"message":"no such route"}}`, http.StatusNotFound)
			case n == 1:
				w.Header().Set("Retry-After", "2")
				http.Error(w, `{"error":{"message":"slow down"}}`, http.StatusTooManyRequests)
			case strings.Contains(string(b), `"id":"toy-hold"`):
				<-hold
				_, _ = io.WriteString(w, `{"out":"cut","out_ids":[9],"done":"abort"}`)
			default:
				_, _ = io.WriteString(w, `{"out":"hi","out_ids":[7,8],"done":"stop"}`)
			}
		}))
	}
	a, b := mk("a"), mk("b")
	defer a.Close()
	defer b.Close()
	cfg.Endpoints = []string{a.URL + "/v1", b.URL + "/v1"}
	cfg.MaxAttempts = 3
	var sleeps []time.Duration
	var attempts []string
	c, err := openai.NewHTTP(cfg, openai.HTTPOptions{
		Sleep: func(_ context.Context, d time.Duration) error { sleeps = append(sleeps, d); return nil },
		OnAttempt: func(ep string, _ time.Duration, err *inference.Error, retrying bool) {
			class := "ok"
			if err != nil {
				class = err.Class
			}
			attempts = append(attempts, class)
		},
		BreakAfter: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// The first attempt meets a 429 and is sent again to the other
	// endpoint (Retry-After holds the first out).
	resp, err := c.Complete(context.Background(), &inference.Request{PromptTokenIDs: []int32{1, 2, 3}, Params: map[string]any{"max_tokens": 5}, Sample: "s0", Affinity: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "hi" || !slices.Equal(resp.Message.TokenIDs, []int32{7, 8}) || resp.FinishReason != "stop" || resp.PromptTokens != 3 {
		t.Errorf("decoded %+v", resp)
	}
	if strings.Join(attempts, ",") != "rate_limited,ok" || len(sleeps) != 1 {
		t.Errorf("attempts %v, sleeps %v: want a 429 retried once", attempts, sleeps)
	}
	mu.Lock()
	want := `/toy/run {"budget":5,"id":"toy-s0","ids":[1,2,3]}`
	if len(seen) != 2 || !strings.HasSuffix(seen[0], want) || !strings.HasSuffix(seen[1], want) || seen[0][0] == seen[1][0] {
		t.Errorf("requests %q, want the toy's body twice, on two endpoints, at the root", seen)
	}
	mu.Unlock()
	if st := c.Stats(); st[0].Retries+st[1].Retries != 1 {
		t.Errorf("stats %+v: want one retry", st)
	}

	// Abort asks for the toy's requests in flight by the toy's own body.
	done := make(chan error, 1)
	go func() {
		_, err := c.Complete(context.Background(), &inference.Request{PromptTokenIDs: []int32{4}, Sample: "hold"})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Abort(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(aborts) != 1 || !strings.HasSuffix(aborts[0], ` {"cancel":"toy-hold"}`) {
		t.Errorf("aborts %q, want one, by the toy's id", aborts)
	}
	mu.Unlock()

	// A server without the route: the toy's hint on the final error.
	none := httptest.NewServer(http.NotFoundHandler())
	defer none.Close()
	cfg.Endpoints = []string{none.URL + "/v1"}
	c2, err := openai.NewHTTP(cfg, openai.HTTPOptions{BreakAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, err = c2.Complete(context.Background(), &inference.Request{PromptTokenIDs: []int32{1}, Sample: "x"})
	if err == nil || !strings.HasSuffix(err.Error(), "(the toy API needs a toy server)") {
		t.Errorf("a 404: %v, want the toy's hint", err)
	}
}
