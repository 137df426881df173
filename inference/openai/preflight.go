package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trajflow/trajflow/pipeline"

	"github.com/trajflow/trajflow/inference"
)

// ErrPreflight marks the error of Preflight: an endpoint cannot serve the
// run (unreachable, the key refused, the model not served).
var ErrPreflight = errors.New("inference endpoint check failed")

// DefaultPreflightTimeout bounds the check of one endpoint.
const DefaultPreflightTimeout = 10 * time.Second

// Preflight checks every endpoint of cfg before a run reads any data, so
// that a broken set-up fails in a second instead of filling the output with
// error rows. For each endpoint it asks GET {base}/models, with the API key
// (opts.APIKey) as a request would send it, and checks that:
//
//   - the endpoint is reachable (a TCP connection, an HTTP answer);
//   - the key is accepted (not 401 or 403);
//   - the base URL serves the OpenAI API (not 404), and answers 2xx;
//   - cfg.Model is among the models it lists (when the list parses and is
//     not empty).
//
// It reports the problems of every endpoint at once, each naming its
// generate.endpoints[i] and the cause, wrapped in ErrPreflight. opts
// supplies the API key, the *http.Client and ProbeTimeout (default
// DefaultPreflightTimeout per endpoint); the rest of opts is ignored. It
// is the check `trajflow run` makes before a run; a validate command can
// call it alone.
func Preflight(ctx context.Context, cfg inference.Config, opts HTTPOptions) error {
	client := opts.HTTPClient
	if client == nil {
		tr := &http.Transport{Proxy: http.ProxyFromEnvironment}
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr, CheckRedirect: noRedirect}
	}
	timeout := opts.ProbeTimeout
	if timeout <= 0 {
		timeout = DefaultPreflightTimeout
	}
	problems := make([]error, len(cfg.Endpoints))
	var wg sync.WaitGroup
	for i, raw := range cfg.Endpoints {
		key := fmt.Sprintf("generate.endpoints[%d]", i)
		base, _, name, err := normaliseEndpoint(raw)
		if err != nil {
			problems[i] = fmt.Errorf("%s: %v", key, err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := checkEndpoint(ctx, client, timeout, base, name, cfg.Model, opts.APIKey); err != nil {
				problems[i] = fmt.Errorf("%s: %w", key, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("%w:\n%w", ErrPreflight, err)
	}
	return ctx.Err()
}

// checkEndpoint is Preflight's check of one endpoint.
func checkEndpoint(ctx context.Context, client *http.Client, timeout time.Duration, base, name, model, key string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/models", nil)
	if err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	req.Header.Set("Accept", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: unreachable: no answer to GET /models within %s", name, timeout)
		}
		return fmt.Errorf("%s: unreachable: %v", name, stripURL(err))
	}
	defer func() { _ = resp.Body.Close() }() // best effort: a response body, read
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	msg := serverMessage(body)
	if key != "" {
		msg = strings.ReplaceAll(msg, key, "[redacted]")
	}
	switch st := resp.StatusCode; {
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		hint := "no API key was sent; set generate.api_key_env to the variable holding it"
		if key != "" {
			hint = "check the key in the variable generate.api_key_env names"
		}
		return fmt.Errorf("%s: the API key was refused (HTTP %d: %s); %s", name, st, msg, hint)
	case st >= 300 && st < 400:
		return fmt.Errorf("%s", redirectMessage(name+"/models", st, resp.Header.Get("Location")))
	case st == http.StatusNotFound:
		return fmt.Errorf("%s: GET /models answered 404 (%s): is the base URL right? It usually ends in /v1", name, msg)
	case st < 200 || st > 299:
		return fmt.Errorf("%s: GET /models answered HTTP %d: %s", name, st, msg)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if len(bytes.TrimSpace(body)) > 0 && !json.Valid(body) {
		// An HTML page (a proxy's, a login page, a web server's index)
		// answers GET /models with 200 where no OpenAI API is: every
		// request would fail.
		return fmt.Errorf("%s: GET /models answered HTTP %d with a body that is not JSON (Content-Type %q, %s): the OpenAI API is not there; is the base URL right (it usually ends in /v1), or is a proxy or login page in the way?",
			name, resp.StatusCode, resp.Header.Get("Content-Type"), notJSONStart(body))
	}
	if json.Unmarshal(body, &list) != nil || len(list.Data) == 0 {
		return nil // not a model list we can read: nothing to check
	}
	var served []string
	for _, m := range list.Data {
		if servesModel(m.ID, model) {
			return nil
		}
		served = append(served, m.ID)
	}
	slices.Sort(served)
	if len(served) > 10 {
		served = append(served[:10], fmt.Sprintf("… (%d in all)", len(list.Data)))
	}
	return fmt.Errorf("%s: the model %q (generate.model) is not served; it serves: %s", name, model, strings.Join(served, ", "))
}

// notJSONStart shows the start of a body that is not JSON: its first
// bytes, printable, at most 60.
func notJSONStart(body []byte) string {
	s := strings.Join(strings.Fields(string(body[:min(len(body), 200)])), " ")
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return fmt.Sprintf("starting %q", s)
}

// servesModel reports whether a model the server lists (id) is the one
// generate.model names: the same name, or, as Ollama resolves names, the
// name without a tag for the tag "latest" (Ollama lists "tiny:latest" and
// serves it to requests for "tiny").
func servesModel(id, model string) bool {
	if id == model {
		return true
	}
	tagless := !strings.Contains(model[strings.LastIndex(model, "/")+1:], ":")
	return tagless && model != "" && id == model+":latest"
}

// noRedirect makes a client return a redirect as it is: a POST that
// follows one becomes a GET, and the server's 404 or 405 would then hide
// the redirect.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// redirectMessage says that url answered with a redirect, and where to
// (its user info and query redacted).
func redirectMessage(url string, status int, location string) string {
	if location == "" {
		location = "(no Location header)"
	}
	return fmt.Sprintf("%s: the server redirects (HTTP %d) to %s; trajflow does not follow redirects: set generate.endpoints to the base URL it should use",
		url, status, pipeline.RedactURLs(location))
}
