package inference_test

import (
	"context"
	"testing"

	"github.com/trajflow/trajflow/inference"
)

type plainClient struct{}

func (plainClient) Complete(context.Context, *inference.Request) (*inference.Response, error) {
	return &inference.Response{}, nil
}

type abortClient struct {
	plainClient
	aborts *int
}

func (c abortClient) Abort(context.Context) error { *c.aborts++; return nil }

type tokAbortClient struct{ abortClient }

func (tokAbortClient) Tokenize(context.Context, *inference.TokenizeRequest) ([]int32, error) {
	return nil, nil
}

func (tokAbortClient) MaxModelLen() int { return 8 }

// A decorator keeps its backend's abort call, however deep and whatever
// else the backend can do: AborterOf finds it and it reaches the backend;
// a backend without one gives none.
func TestDecorateKeepsAborter(t *testing.T) {
	deco := func(c inference.Client) inference.Client { return inference.Decorate(plainClient{}, c) }
	for _, tc := range []struct {
		name      string
		backend   func(aborts *int) inference.Client
		layers    int
		wantAbort bool
		wantTok   bool
	}{
		{"plain backend", func(*int) inference.Client { return plainClient{} }, 1, false, false},
		{"aborter itself", func(n *int) inference.Client { return abortClient{aborts: n} }, 0, true, false},
		{"aborter, one decorator", func(n *int) inference.Client { return abortClient{aborts: n} }, 1, true, false},
		{"aborter, three decorators", func(n *int) inference.Client { return abortClient{aborts: n} }, 3, true, false},
		{"tokenizer and aborter, one decorator", func(n *int) inference.Client { return tokAbortClient{abortClient{aborts: n}} }, 1, true, true},
		{"tokenizer and aborter, three decorators", func(n *int) inference.Client { return tokAbortClient{abortClient{aborts: n}} }, 3, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var aborts int
			c := tc.backend(&aborts)
			for range tc.layers {
				c = deco(c)
			}
			a, ok := inference.AborterOf(c)
			if ok != tc.wantAbort {
				t.Fatalf("AborterOf: %v, want %v", ok, tc.wantAbort)
			}
			if ok {
				if err := a.Abort(context.Background()); err != nil || aborts != 1 {
					t.Errorf("Abort: %v, the backend aborted %d times", err, aborts)
				}
			}
			_, tok := c.(inference.Tokenizer)
			l, lim := c.(inference.ContextLimiter)
			if tok != tc.wantTok || lim != tc.wantTok || lim && l.MaxModelLen() != 8 {
				t.Errorf("Tokenizer %v, ContextLimiter %v; want %v", tok, lim, tc.wantTok)
			}
		})
	}
}
