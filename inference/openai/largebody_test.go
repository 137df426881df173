package openai

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// Large bodies read and decoded at once stay within LargeBodyBytes,
// whatever the concurrency, with and without a Content-Length, and every
// request still gets its whole answer.
func TestLargeBodiesTakeTurns(t *testing.T) {
	for _, sized := range []bool{true, false} {
		t.Run(fmt.Sprint("content-length=", sized), func(t *testing.T) {
			content := strings.Repeat("x", 5<<20) // over maxPooledBuffer
			body := `{"choices":[{"message":{"role":"assistant","content":"` + content + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`
			s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if sized {
					w.Header().Set("Content-Length", fmt.Sprint(len(body)))
				}
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				// Slowly, so that the readers overlap unless they take
				// turns.
				for i := 0; i < len(body); i += 1 << 20 {
					w.Write([]byte(body[i:min(i+1<<20, len(body))]))
					w.(http.Flusher).Flush()
					time.Sleep(5 * time.Millisecond)
				}
			})
			cfg := testConfig(s.URL + "/v1")
			cfg.Concurrency = 6
			const bound = 6 << 20 // one body at a time
			c := newClient(t, cfg, HTTPOptions{LargeBodyBytes: bound, MaxResponseBytes: 8 << 20})
			var g errgroup.Group
			for range 6 {
				g.Go(func() error {
					resp, err := c.Complete(context.Background(), userReq("x"))
					if err != nil {
						return err
					}
					if len(resp.Message.Content) != len(content) {
						return fmt.Errorf("an answer of %d bytes", len(resp.Message.Content))
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				t.Fatal(err)
			}
			if s.max.Load() < 2 {
				t.Fatalf("the server never had two requests at once (%d): the test shows nothing", s.max.Load())
			}
			if p := c.large.peak.Load(); p == 0 || p > bound {
				t.Fatalf("large bodies held at once: %d bytes, bound %d", p, bound)
			}
			if h := c.large.held.Load(); h != 0 {
				t.Fatalf("%d bytes still held", h)
			}
		})
	}
}
