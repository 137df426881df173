package gymcontract

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// ModelOf is the model a resources server or agent validates a POST to
// path with: /seed_session, /verify, /aggregate_metrics and an agent's
// /run as Gym's base servers declare them, any other path a tool call.
func ModelOf(path string) string {
	switch path {
	case "/seed_session":
		return "BaseSeedSessionRequest"
	case "/verify":
		return "BaseVerifyRequest"
	case "/aggregate_metrics":
		return "AggregateMetricsRequest"
	case "/run":
		return "BaseRunRequest"
	}
	return "ToolCallRequest"
}

// Rejections records the bodies a Gate refused.
type Rejections struct {
	mu   sync.Mutex
	errs []error
	seen map[string]int
}

// Errors returns the refusals so far.
func (r *Rejections) Errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// Seen returns how many bodies were posted to path (refused or not).
func (r *Rejections) Seen(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[path]
}

// Gate validates each POST body with the model of its path (ModelOf)
// before next sees it, as Gym's FastAPI servers do: a body that does not
// validate is answered 422 with the problems as detail, and recorded.
func (m *Models) Gate(next http.Handler) (http.Handler, *Rejections) {
	rej := &Rejections{seen: map[string]int{}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rej.mu.Lock()
		rej.seen[r.URL.Path]++
		rej.mu.Unlock()
		if err := m.Validate(ModelOf(r.URL.Path), body); err != nil {
			rej.mu.Lock()
			rej.errs = append(rej.errs, err)
			rej.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_ = json.NewEncoder(w).Encode(map[string]any{"detail": err.Error()})
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	}), rej
}
