package serve_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/serve/client"
)

// tokenLookup holds serve.token_env's variable TF_SERVE_TOKEN.
func tokenLookup(token string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		if name == "TF_SERVE_TOKEN" {
			return token, true
		}
		return "", false
	}
}

// answer sends a request and returns its status and error body.
func answer(t *testing.T, method, url, auth string, body io.Reader) (int, client.Error, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e client.Error
	if resp.StatusCode/100 != 2 {
		if err := jsonUnmarshal(raw, &e); err != nil {
			t.Fatalf("%s %s: %d, a body that is not an error's JSON: %s", method, url, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, e, string(raw)
}

// spaces reads n spaces.
type spaces struct{ n int64 }

func (s *spaces) Read(p []byte) (int, error) {
	if s.n <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), s.n)
	for i := range k {
		p[i] = ' '
	}
	s.n -= k
	return int(k), nil
}

// TestServeBodyLimits: a body over 64 KiB (an ack's: over 64 MiB, the
// room of a trainer's logprobs) is a 413 naming body on every endpoint,
// whether its length is announced or not, and the service goes on.
func TestServeBodyLimits(t *testing.T) {
	s := start(t, testConfig(t, t.TempDir()), serve.Options{})
	for _, announced := range []bool{true, false} {
		req, err := http.NewRequest("POST", s.url+"/v1/steps/1/ack", &spaces{serve.MaxAckBody + 1})
		if err != nil {
			t.Fatal(err)
		}
		if announced {
			req.ContentLength = serve.MaxAckBody + 1
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(raw), `"parameter":"body"`) {
			t.Errorf("an ack over %d bytes (length announced %v): %d %s, want 413 naming body", serve.MaxAckBody, announced, resp.StatusCode, raw)
		}
	}
	big := bytes.Repeat([]byte(" "), 10<<20)
	for _, rt := range []struct{ method, path string }{
		{"POST", "/v1/policy"},
		{"POST", "/v1/pause"},
		{"POST", "/v1/resume"},
		{"GET", "/v1/status"},
		{"GET", "/v1/steps/next?groups=1"},
		{"GET", "/healthz"},
	} {
		for _, announced := range []bool{true, false} {
			var body io.Reader = bytes.NewReader(big)
			if !announced {
				body = io.MultiReader(bytes.NewReader(big)) // no length: chunked
			}
			code, e, raw := answer(t, rt.method, s.url+rt.path, "", body)
			if code != http.StatusRequestEntityTooLarge || e.Parameter != "body" {
				t.Errorf("%s %s with 10 MB (length announced %v): %d %s, want 413 naming body", rt.method, rt.path, announced, code, raw)
			}
		}
		// A body within the limit is read as before.
		code, _, raw := answer(t, rt.method, s.url+rt.path, "", strings.NewReader(strings.Repeat(" ", serve.MaxBody)))
		if code == http.StatusRequestEntityTooLarge {
			t.Errorf("%s %s with %d bytes: %s", rt.method, rt.path, serve.MaxBody, raw)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := client.New(s.url, "").Status(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestServeErrorBodies: every error answer names a parameter or gives a
// reason, and none repeats a value of the request, the bearer token sent
// as a parameter by mistake included.
func TestServeErrorBodies(t *testing.T) {
	const token = "s3cret-serve-token-value"
	cfg := testConfig(t, t.TempDir(), "serve.token_env=TF_SERVE_TOKEN", "serve.max_groups_per_step=64")
	s := start(t, cfg, serve.Options{LookupEnv: tokenLookup(token)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client.New(s.url, token)
	if err := c.SetPolicy(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path, body string
		code               int
		param, reason      string
	}{
		{"GET", "/v1/steps/next?groups=" + token, "", 400, "groups", ""},
		{"GET", "/v1/steps/next?groups=2&format=" + token, "", 400, "format", ""},
		{"GET", "/v1/steps/next?groups=2&" + token + "=1", "", 400, token, ""}, // a name, not a value
		{"POST", "/v1/steps/" + token + "/ack", "", 400, "step", ""},
		{"POST", "/v1/steps/99/ack", "", 404, "step", ""},
		{"POST", "/v1/policy", `{"version": "` + token + `"}`, 400, "version", ""},
		{"POST", "/v1/policy", `{"version": 2.5}`, 400, "version", ""},
		{"POST", "/v1/policy", `{"v` + token + `": 1}`, 400, "body", ""},
		{"POST", "/v1/policy", token, 400, "body", ""},
		{"POST", "/v1/policy", `{"version": 1}`, 409, "version", ""},
		{"POST", "/v1/pause?mode=" + token, "", 400, "mode", ""},
		{"POST", "/v1/pause?by=" + token + "%01", "", 400, "by", ""},
		{"POST", "/v1/pause", `{"mode": "` + token + `"}`, 400, "mode", ""},
		{"GET", "/v1/" + token, "", 404, "", client.ReasonNoSuchEndpoint},
		{"GET", "/v1/policy", "", 405, "method", ""},
		{"GET", "/v1/steps/" + token + "/ack", "", 405, "method", ""},
	} {
		code, e, raw := answer(t, tc.method, s.url+tc.path, "Bearer "+token, strings.NewReader(tc.body))
		if code != tc.code || e.Parameter != tc.param || e.Reason != tc.reason || e.Message == "" {
			t.Errorf("%s %s %s: %d %s, want %d naming %q, reason %q", tc.method, tc.path, tc.body, code, raw, tc.code, tc.param, tc.reason)
		}
		if strings.Contains(e.Message, token) {
			t.Errorf("%s %s %s: the error repeats the value: %s", tc.method, tc.path, tc.body, raw)
		}
		if strings.Contains(raw, "int64") || strings.Contains(raw, "Go ") || strings.Contains(raw, "PolicyBody") {
			t.Errorf("%s %s %s: the error speaks of Go types: %s", tc.method, tc.path, tc.body, raw)
		}
	}
	// A wrong token is not repeated either.
	code, e, raw := answer(t, "GET", s.url+"/v1/status", "Bearer "+token+"-wrong", nil)
	if code != 401 || e.Parameter != "Authorization" || strings.Contains(raw, token) {
		t.Errorf("a wrong token: %d %s", code, raw)
	}
	if strings.Contains(s.log(), token) {
		t.Errorf("the log holds the token: %s", s.log())
	}
}

// TestServeStoppingAndEndedReasons: the 503s give their reason: stopping
// while the service stops, ended once the input ran out.
func TestServeStoppingAndEndedReasons(t *testing.T) {
	s := start(t, testConfig(t, t.TempDir(), "source.limit=4"), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client.New(s.url, "")
	c.Retry.Deadline = -1
	_, err := c.Next(ctx, 64, "")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 503 || ce.Reason != client.ReasonEnded || ce.Parameter != "" {
		t.Fatalf("the input ran out: %v (%+v), want a 503 of reason ended", err, ce)
	}

	s = start(t, testConfig(t, t.TempDir()), serve.Options{})
	c = client.New(s.url, "")
	c.Retry.Deadline = -1
	got := make(chan error, 1)
	go func() {
		_, err := c.Next(ctx, 4000, "") // never fills
		got <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Waiting) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the request did not wait")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.stop(t)
	if err := <-got; !errors.As(err, &ce) || ce.Status != 503 || ce.Reason != client.ReasonStopping {
		t.Fatalf("stopping: %v, want a 503 of reason stopping", err)
	}
}

// TestServeBearerScheme: the scheme of the Authorization header is
// matched without regard to case (RFC 7235); the token is not.
func TestServeBearerScheme(t *testing.T) {
	const token = "s3cret-serve-token-value"
	s := start(t, testConfig(t, t.TempDir(), "serve.token_env=TF_SERVE_TOKEN"), serve.Options{LookupEnv: tokenLookup(token)})
	for _, tc := range []struct {
		auth string
		code int
	}{
		{"Bearer " + token, 200},
		{"bearer " + token, 200},
		{"BEARER " + token, 200},
		{"bEaReR  " + token + " ", 200},
		{"Bearer " + strings.ToUpper(token), 401},
		{"Bearer" + token, 401},
		{"Basic " + token, 401},
		{"Bearer", 401},
		{"", 401},
	} {
		if code, _, raw := answer(t, "GET", s.url+"/v1/status", tc.auth, nil); code != tc.code {
			t.Errorf("Authorization %q: %d %s, want %d", tc.auth, code, raw, tc.code)
		}
	}
}

// TestServeMetricsOpen: run.metrics_addr's listener answers without the
// bearer token (docs/serve.md#security says so), with figures only: the
// token is in no metric.
func TestServeMetricsOpen(t *testing.T) {
	const token = "s3cret-serve-token-value"
	addr := freeAddr(t)
	cfg := testConfig(t, t.TempDir(), "serve.token_env=TF_SERVE_TOKEN", "run.metrics_addr="+addr)
	s := start(t, cfg, serve.Options{LookupEnv: tokenLookup(token)})
	// Scraped once the run goes (a step made): the run's listener starts
	// with it.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	step, err := client.New(s.url, token).Next(ctx, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	step.Release()
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", addr))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "trajflow_serve_policy_version") {
		t.Fatalf("/metrics without a token: %d\n%s", resp.StatusCode, b)
	}
	if strings.Contains(string(b), token) {
		t.Fatal("a metric holds the token")
	}
}
