package openai

import (
	"context"
	"net/http"
	"sync"
	"testing"
)

// OnResponse sees the status and headers of every attempt, the refused
// ones included: the rate limiter reads x-ratelimit-* from them.
func TestOnResponseSeesEveryAttempt(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("x-ratelimit-remaining-requests", []string{"0", "41"}[min(n, 1)])
		if n == 0 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error": {"message": "slow down"}}`, http.StatusTooManyRequests)
			return
		}
		w.Write([]byte(okBody))
	})
	var mu sync.Mutex
	var seen []string
	c := newClient(t, testConfig(srv.URL+"/v1"), HTTPOptions{OnResponse: func(ep string, status int, h http.Header) {
		mu.Lock()
		seen = append(seen, http.StatusText(status)+" "+h.Get("x-ratelimit-remaining-requests"))
		mu.Unlock()
	}})
	if _, err := c.Complete(context.Background(), userReq("hi")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "Too Many Requests 0" || seen[1] != "OK 41" {
		t.Fatalf("OnResponse saw %q", seen)
	}
}
