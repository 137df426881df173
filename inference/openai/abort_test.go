package openai_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
)

// Abort posts SGLang's abort_all to every endpoint's root; an endpoint
// without the call (vLLM) is named in the error.
func TestAbortAsksEveryEndpoint(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	with := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/abort_request" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		_, _ = io.WriteString(w, `{}`)
	}))
	defer with.Close()
	without := httptest.NewServer(http.NotFoundHandler())
	defer without.Close()

	c, err := openai.NewHTTP(inference.Config{Endpoints: []string{with.URL + "/v1"}, Model: "m", Concurrency: 1, MaxAttempts: 1}, openai.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Abort(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 1 || !strings.Contains(bodies[0], `"abort_all": true`) {
		t.Errorf("bodies %q", bodies)
	}

	c2, err := openai.NewHTTP(inference.Config{Endpoints: []string{with.URL + "/v1", without.URL + "/v1"}, Model: "m", Concurrency: 1, MaxAttempts: 1}, openai.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	err = c2.Abort(context.Background())
	if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(without.URL, "http://")) || !strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("Abort with an endpoint without the call = %v", err)
	}
	if strings.Contains(err.Error(), strings.TrimPrefix(with.URL, "http://")) {
		t.Errorf("the error names the endpoint that answered: %v", err)
	}
}
