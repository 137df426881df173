package config_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/config"
)

func TestIsSecretKey(t *testing.T) {
	for name, want := range map[string]bool{
		"api_key": true, "X-Api-Key": true, "Authorization": true, "accessToken": true, "client_secret": true,
		"password": true, "DB_PASSWORD": true, "APIKey": true, "token": true, "Cookie": true,
		"max_tokens": false, "return_token_ids": false, "api_key_env": false, "answer_field": false,
		"keep": false, "temperature": false, "token_field": false, "monkey": false, "": false,
	} {
		if got := config.IsSecretKey(name); got != want {
			t.Errorf("IsSecretKey(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestRedactURLs(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:8000/v1":                             "http://h:8000/v1",
		"https://u:pw@h/v1?api-key=K":                  "https://[REDACTED]@h/v1?[REDACTED]",
		`Post "http://u:***@h/v1/chat?x=1#f": refused`: `Post "http://[REDACTED]@h/v1/chat?[REDACTED]#f": refused`,
		"a http://h/?k=v and ftp://me@x/p":             "a http://h/?[REDACTED] and ftp://[REDACTED]@x/p",
		"no url here: user@host ? q":                   "no url here: user@host ? q",
		"http://h/path@not-userinfo":                   "http://h/path@not-userinfo",
	} {
		if got := config.RedactURLs(in); got != want {
			t.Errorf("RedactURLs(%q) = %q, want %q", in, got, want)
		}
	}
}

const secretCfg = `source: {path: tasks.jsonl}
generate:
  api_key_env: TRAJFLOW_TEST_REDACT_KEY
  params: {temperature: 0.5, api_key: param-secret-1}
env:
  name: http
  url: http://envuser:url-secret-2@127.0.0.1:9/
  headers: {Authorization: "Bearer header-secret-3", X-Trace: trace-value-4}
`

// No secret of the config reaches the fingerprint's canonical JSON, text
// passed through the redactor, or a config error; a changed secret still
// changes the fingerprint when a key is set.
func TestRedaction(t *testing.T) {
	t.Setenv("TRAJFLOW_TEST_REDACT_KEY", "apikey-secret-5")
	secrets := []string{"param-secret-1", "url-secret-2", "header-secret-3", "trace-value-4", "apikey-secret-5"}
	cfg, err := config.Parse([]byte(secretCfg), "cfg.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, canon := cfg.Fingerprint()
	text := cfg.Redact("server said: bad key apikey-secret-5 for Bearer header-secret-3 at http://envuser:url-secret-2@127.0.0.1:9/step (trace-value-4, param-secret-1)")
	for _, s := range secrets {
		if strings.Contains(canon, s) || strings.Contains(text, s) {
			t.Errorf("%s leaked:\ncanonical %s\ntext %s", s, canon, text)
		}
	}
	if !strings.Contains(canon, `"env.options.headers.Authorization":"\"[REDACTED]\""`) {
		t.Errorf("canonical without a key: %s", canon)
	}

	cfg.UseSecretKey([]byte("0123456789abcdef"))
	a, canonA := cfg.Fingerprint()
	if !strings.Contains(canonA, "hmac-sha256:") {
		t.Errorf("keyed canonical: %s", canonA)
	}
	other, _ := config.Parse([]byte(strings.Replace(secretCfg, "header-secret-3", "header-secret-6", 1)), "cfg.yaml", nil)
	other.UseSecretKey([]byte("0123456789abcdef"))
	if b, _ := other.Fingerprint(); b == a {
		t.Error("a changed header did not change the fingerprint")
	}
	diffs, _ := other.DiffSemantic(canonA)
	if len(diffs) != 1 || !strings.HasPrefix(diffs[0], "env.options.headers.Authorization: ") || strings.Contains(diffs[0], "secret") {
		t.Errorf("diffs %v", diffs)
	}

	// Config errors quote values: the secrets in them are redacted.
	for _, tt := range []struct{ yaml string }{
		{"source: {path: t.jsonl}\ngenerate: {endpoints: [\"ftp://u:pw-secret-7@h/v1?api-key=query-secret-8\"]}\n"},
		{"source: {path: t.jsonl}\ngenerate: {endpoints: \"http://u:pw-secret-7@h/?k=query-secret-8\"}\n"},
		{"source: {path: t.jsonl}\nrepeat: {n: pw-secret-7}\ngenerate: {params: {password: pw-secret-7}}\n"},
	} {
		_, err := config.Parse([]byte(tt.yaml), "cfg.yaml", []string{"generate.params.token=query-secret-8"})
		if err == nil {
			t.Fatalf("%s: want an error", tt.yaml)
		}
		if strings.Contains(err.Error(), "pw-secret-7") || strings.Contains(err.Error(), "query-secret-8") {
			t.Errorf("config error leaks a secret: %v", err)
		}
	}
}

// TestRedactWriterConcurrent: goroutines logging through one redacting
// writer at once reach a writer that is not safe for that (a
// strings.Builder) one line at a time, each whole and redacted (the race
// detector fails the test when writes overlap).
func TestRedactWriterConcurrent(t *testing.T) {
	t.Setenv("TRAJFLOW_TEST_REDACT_KEY", "apikey-secret-5")
	cfg, err := config.Parse([]byte(secretCfg), "cfg.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	w := cfg.Redactor().Writer(&out)
	const goroutines, lines = 8, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(w, "goroutine %d line %d key apikey-secret-5\n", g, i)
			}
		})
	}
	wg.Wait()
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != goroutines*lines {
		t.Fatalf("%d lines, want %d", len(got), goroutines*lines)
	}
	for _, l := range got {
		var g, i int
		if n, _ := fmt.Sscanf(l, "goroutine %d line %d key "+config.Redacted, &g, &i); n != 2 || strings.Contains(l, "secret") {
			t.Fatalf("line %q: not whole, or not redacted", l)
		}
	}
}
