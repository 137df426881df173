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

// toyServer is a server of the toy API: with limit, the first request
// it sees overall is a 429 with Retry-After; a request with id toy-hold waits
// until release is closed and answers as an aborted one, the others
// answer at once; POST /abort_request is recorded.
type toyServer struct {
	mu      sync.Mutex
	seen    []string // "server path body"
	aborts  []string // "server body"
	release chan struct{}
	limit   bool
}

func (s *toyServer) start(t *testing.T, name string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		if r.URL.Path == "/abort_request" {
			s.aborts = append(s.aborts, name+" "+string(b))
			s.mu.Unlock()
			return
		}
		s.seen = append(s.seen, name+" "+r.URL.Path+" "+string(b))
		n := len(s.seen)
		s.mu.Unlock()
		switch {
		case s.limit && n == 1:
			w.Header().Set("Retry-After", "2")
			http.Error(w, `{"error":{"message":"slow down"}}`, http.StatusTooManyRequests)
		case strings.Contains(string(b), `"id":"toy-hold"`):
			<-s.release
			_, _ = io.WriteString(w, `{"out":"cut","out_ids":[9],"done":"abort"}`)
		default:
			_, _ = io.WriteString(w, `{"out":"hi","out_ids":[7,8],"done":"stop"}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

func (s *toyServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// toyConfig is generate.api: toy over endpoints.
func toyConfig(t *testing.T, endpoints ...string) inference.Config {
	var cfg inference.Config
	cfg.API = apiToy
	cfg.SetDefaults()
	cfg.Endpoints = endpoints
	cfg.MaxAttempts = 3
	if err := cfg.Validate(); err != nil {
		t.Fatalf("generate.api: toy: %v", err)
	}
	return cfg
}

// Every package that asks generate.api what it can do sees the toy's
// registration.
func TestToyProtocolIsRegistered(t *testing.T) {
	if !apiToy.Valid() || !apiToy.Tokens() || apiToy.TokenAPI() != apiToy || apiToy.TokenPrompts() != "the toy's /toy/run" || !apiToy.Caps().AbortContinues {
		t.Errorf("toy: Valid %v, Caps %+v", apiToy.Valid(), apiToy.Caps())
	}
	if !slices.Contains(inference.APIs(), apiToy) {
		t.Errorf("APIs() = %v: no toy", inference.APIs())
	}
}

// A protocol registered in one file is carried by the real transport
// end to end: its path and body on the wire, a 429 with Retry-After
// retried on the other endpoint, its answer decoded.
func TestToyProtocolEndToEnd(t *testing.T) {
	s := &toyServer{limit: true}
	var mu sync.Mutex
	var sleeps []time.Duration
	var attempts []string
	c, err := openai.NewHTTP(toyConfig(t, s.start(t, "a"), s.start(t, "b")), openai.HTTPOptions{
		Sleep: func(_ context.Context, d time.Duration) error {
			mu.Lock()
			sleeps = append(sleeps, d)
			mu.Unlock()
			return nil
		},
		OnAttempt: func(_ string, _ time.Duration, err *inference.Error, _ bool) {
			class := "ok"
			if err != nil {
				class = err.Class
			}
			mu.Lock()
			attempts = append(attempts, class)
			mu.Unlock()
		},
		BreakAfter: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	resp, err := c.Complete(context.Background(), &inference.Request{PromptTokenIDs: []int32{1, 2, 3}, Params: map[string]any{"max_tokens": 5}, Sample: "s0", Affinity: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "hi" || !slices.Equal(resp.Message.TokenIDs, []int32{7, 8}) || resp.FinishReason != "stop" || resp.PromptTokens != 3 {
		t.Errorf("decoded %+v", resp)
	}
	mu.Lock()
	if strings.Join(attempts, ",") != "rate_limited,ok" || len(sleeps) != 1 {
		t.Errorf("attempts %v, sleeps %v: want a 429 retried once", attempts, sleeps)
	}
	mu.Unlock()
	seen := s.requests()
	want := `/toy/run {"budget":5,"id":"toy-s0","ids":[1,2,3]}`
	if len(seen) != 2 || !strings.HasSuffix(seen[0], want) || !strings.HasSuffix(seen[1], want) || seen[0][0] == seen[1][0] {
		t.Errorf("requests %q, want the toy's body twice, on two endpoints, at the root", seen)
	}
	if st := c.Stats(); st[0].Retries+st[1].Retries != 1 {
		t.Errorf("stats %+v: want one retry", st)
	}
}

// Abort asks for the toy's requests in flight by the toy's own bodies
// (AbortBodies), on the endpoint each went to.
func TestToyProtocolAbort(t *testing.T) {
	s := &toyServer{release: make(chan struct{})}
	c, err := openai.NewHTTP(toyConfig(t, s.start(t, "a")), openai.HTTPOptions{BreakAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		_, err := c.Complete(context.Background(), &inference.Request{PromptTokenIDs: []int32{4}, Sample: "hold"})
		done <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); len(s.requests()) < 1 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Abort(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(s.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.aborts) != 1 || !strings.HasSuffix(s.aborts[0], ` {"cancel":"toy-hold"}`) {
		t.Errorf("aborts %q, want one, by the toy's id", s.aborts)
	}
}

// A server without the toy's route: the toy's hint on the final error.
func TestToyProtocolHint(t *testing.T) {
	none := httptest.NewServer(http.NotFoundHandler())
	defer none.Close()
	c, err := openai.NewHTTP(toyConfig(t, none.URL+"/v1"), openai.HTTPOptions{BreakAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Complete(context.Background(), &inference.Request{PromptTokenIDs: []int32{1}, Sample: "x"})
	if err == nil || !strings.HasSuffix(err.Error(), "(the toy API needs a toy server)") {
		t.Errorf("a 404: %v, want the toy's hint", err)
	}
}
