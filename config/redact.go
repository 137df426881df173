package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/storage"
	"go.yaml.in/yaml/v3"
)

// Redacted replaces a secret wherever trajflow writes text.
const Redacted = pipeline.Redacted

// minSecretLen is the shortest value searched for in free text. Shorter
// values are redacted where the config is written key by key, but looking
// for them in messages would blank out ordinary words and numbers.
const minSecretLen = 4

// What makes a value a secret. These are the one set of rules every place
// that writes the config, an error or a log line follows:
//
//   - a key named like a secret (IsSecretKey): token, key, secret,
//     password, authorization, ...; every value under it;
//   - every value of a headers map, and of an env map nested in a section
//     (the variables a subprocess environment hands its processes);
//   - the options an environment declares secret (envs.Spec.Secret);
//   - the user info and the query string of any URL;
//   - the value of the variable generate.api_key_env names;
//   - the object storage secrets: AWS_SECRET_ACCESS_KEY and
//     AWS_SESSION_TOKEN (storage.SecretEnv).

// secretWords are the last words of key names that hold secrets.
var secretWords = map[string]bool{
	"token": true, "key": true, "apikey": true, "secret": true, "secrets": true,
	"password": true, "passwords": true, "passwd": true, "pass": true, "passphrase": true,
	"authorization": true, "auth": true, "credential": true, "credentials": true,
	"cookie": true, "cookies": true, "signature": true,
}

// IsSecretKey reports whether a config key or header name names a secret:
// its last word (words split at _ - . spaces and case changes) is token,
// key, secret, password, authorization or the like. "api_key",
// "X-Api-Key", "accessToken" and "Authorization" are secret;
// "max_tokens", "return_token_ids" and "api_key_env" (the variable's name,
// not the key) are not.
func IsSecretKey(name string) bool {
	w := words(name)
	return len(w) > 0 && secretWords[w[len(w)-1]]
}

// words splits a key name into lower-case words.
func words(s string) []string {
	var out []string
	var cur []rune
	rs := []rune(s)
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for i, r := range rs {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			flush()
			continue
		case unicode.IsUpper(r) && i > 0 && (unicode.IsLower(rs[i-1]) ||
			(unicode.IsUpper(rs[i-1]) && i+1 < len(rs) && unicode.IsLower(rs[i+1]))):
			flush()
		}
		cur = append(cur, r)
	}
	flush()
	return out
}

// secretPath reports whether the value at a config path (keys from the
// root, e.g. env, headers, Authorization) is a secret as a whole.
// envSecret are the options the environment declares secret.
func secretPath(path []string, envSecret []string) bool {
	if len(path) >= 3 && path[0] == "env" && path[1] == "routes" {
		path = append([]string{"env"}, path[3:]...) // a route is an env section
	}
	if len(path) >= 2 && path[0] == "env" && path[1] == "options" {
		path = append([]string{"env"}, path[2:]...) // Semantic's spelling
	}
	for i, k := range path {
		if IsSecretKey(k) {
			return true
		}
		last := i == len(path)-1
		if !last && (k == "headers" || (k == "env" && i > 0)) {
			return true
		}
		if i == 1 && path[0] == "env" && slices.Contains(envSecret, k) {
			return true
		}
	}
	return false
}

// urlPattern finds URLs in text; it stops at spaces and quotes.
var urlPattern = pipeline.URLPattern()

// RedactURLs replaces the user info and the query string of every URL in
// s: "https://user:pw@host/v1?api-key=k" becomes
// "https://[REDACTED]@host/v1?[REDACTED]" (pipeline.RedactURLs).
func RedactURLs(s string) string { return pipeline.RedactURLs(s) }

// urlSecrets lists the secret parts of the URLs in s: user info, password,
// query string and query values.
func urlSecrets(s string) []string {
	var out []string
	for _, m := range urlPattern.FindAllString(s, -1) {
		u, err := url.Parse(m)
		if err != nil {
			continue
		}
		if u.User != nil {
			out = append(out, u.User.String())
			if p, ok := u.User.Password(); ok {
				out = append(out, p, url.QueryEscape(p))
			}
		}
		if u.RawQuery != "" {
			out = append(out, u.RawQuery)
			for _, vs := range u.Query() {
				for _, v := range vs {
					out = append(out, v, url.QueryEscape(v))
				}
			}
		}
	}
	return out
}

// Redactor removes a config's secrets from text: the values the rules
// above call secret, wherever they appear, and the user info and query of
// every URL. The zero value redacts URLs only.
type Redactor struct {
	literals []string // longest first
}

// String returns s without secrets.
func (r *Redactor) String(s string) string {
	s = RedactURLs(s)
	if r == nil {
		return s
	}
	for _, l := range r.literals {
		if strings.Contains(s, l) {
			s = strings.ReplaceAll(s, l, Redacted)
		}
	}
	return s
}

// Writer returns a writer that redacts each write before passing it to w,
// one write at a time: a run's goroutines log through it at once, and
// each line reaches w whole. A secret split across two writes is not
// caught: write whole lines.
func (r *Redactor) Writer(w io.Writer) io.Writer { return &redactWriter{r: r, w: w} }

type redactWriter struct {
	r  *Redactor
	mu sync.Mutex
	w  io.Writer
}

func (rw *redactWriter) Write(p []byte) (int, error) {
	s := rw.r.String(string(p))
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if _, err := io.WriteString(rw.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}

// newRedactor collects the secrets of a config given as a generic tree
// (maps, lists and scalars, as YAML decodes into any).
func newRedactor(tree any) *Redactor {
	var envSecret []string
	seen := map[string]bool{}
	if m, ok := tree.(map[string]any); ok {
		if env, ok := m["env"].(map[string]any); ok {
			if name, ok := env["name"].(string); ok {
				if spec, ok := envs.Lookup(name); ok {
					envSecret = spec.Secret
				}
			}
			// Every route's secret options (a route's name defaults to
			// its key).
			routes, _ := env["routes"].(map[string]any)
			for key, rv := range routes {
				name := key
				if rm, ok := rv.(map[string]any); ok {
					if n, ok := rm["name"].(string); ok && n != "" {
						name = n
					}
				}
				if spec, ok := envs.Lookup(name); ok {
					envSecret = append(envSecret, spec.Secret...)
				}
			}
		}
		if gen, ok := m["generate"].(map[string]any); ok {
			if name, ok := gen["api_key_env"].(string); ok && name != "" {
				if key := os.Getenv(name); key != "" {
					seen[key] = true
				}
			}
		}
		// serve's bearer token.
		if sv, ok := m["serve"].(map[string]any); ok {
			if name, ok := sv["token_env"].(string); ok && name != "" {
				if key := os.Getenv(name); key != "" {
					seen[key] = true
				}
			}
		}
	}
	// The object storage credentials (storage.FromEnv) are secrets
	// wherever they would surface: a store's error echoing a request, a
	// server's message.
	for _, name := range storage.SecretEnv {
		if v := os.Getenv(name); v != "" {
			seen[v] = true
		}
	}
	var walk func(path []string, v any)
	walk = func(path []string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				walk(append(path[:len(path):len(path)], k), c)
			}
		case []any:
			for _, c := range x {
				walk(path, c)
			}
		case nil:
		default:
			s := fmt.Sprint(x)
			if secretPath(path, envSecret) {
				seen[s] = true
			}
			for _, p := range urlSecrets(s) {
				seen[p] = true
			}
		}
	}
	walk(nil, tree)
	r := &Redactor{}
	for s := range seen {
		if len(s) >= minSecretLen {
			r.literals = append(r.literals, s)
		}
	}
	sort.Slice(r.literals, func(i, j int) bool {
		if len(r.literals[i]) != len(r.literals[j]) {
			return len(r.literals[i]) > len(r.literals[j])
		}
		return r.literals[i] < r.literals[j]
	})
	return r
}

// Redactor returns the redactor of the config's secrets.
func (c *Config) Redactor() *Redactor {
	b, err := yaml.Marshal(c)
	if err != nil {
		return &Redactor{}
	}
	var tree any
	if err := yaml.Unmarshal(b, &tree); err != nil {
		return &Redactor{}
	}
	return newRedactor(tree)
}

// Redact returns s without the config's secrets (see Redactor).
func (c *Config) Redact(s string) string { return c.Redactor().String(s) }

// RedactValue returns a copy of v (maps, lists, scalars) in which every
// value the rules call secret, under the key path it sits at, is replaced
// by Redacted, and every URL loses its user info and query.
func RedactValue(path []string, v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, c := range x {
			out[k] = RedactValue(append(path[:len(path):len(path)], k), c)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, c := range x {
			out[i] = RedactValue(path, c)
		}
		return out
	case nil:
		return nil
	}
	if secretPath(path, nil) {
		return Redacted
	}
	if s, ok := v.(string); ok {
		return RedactURLs(s)
	}
	return v
}

// UseSecretKey sets the key of the keyed hash (HMAC-SHA256) that stands
// for secret values in the fingerprint. The runner keeps one random key
// per output directory, so a changed secret changes the fingerprint while
// the files never hold anything the secret can be recovered from. Without
// a key, secret values all read Redacted (a changed secret goes unseen).
func (c *Config) UseSecretKey(key []byte) { c.secretKey = key }

// secretValue is what the fingerprint holds for a secret value.
func (c *Config) secretValue(v string) string {
	if len(c.secretKey) == 0 {
		return `"` + Redacted + `"`
	}
	m := hmac.New(sha256.New, c.secretKey)
	m.Write([]byte(v))
	return `"hmac-sha256:` + hex.EncodeToString(m.Sum(nil)[:16]) + `"`
}

// redactSemantic replaces the secret values of flattened semantic keys.
func (c *Config) redactSemantic(sem map[string]string) {
	var envSecret []string
	if spec, ok := envs.Lookup(c.Env.Name); ok {
		envSecret = spec.Secret
	}
	for _, r := range c.Env.Routes {
		if spec, ok := envs.Lookup(r.Name); ok {
			envSecret = append(envSecret, spec.Secret...)
		}
	}
	for k, v := range sem {
		if secretPath(strings.Split(k, "."), envSecret) || RedactURLs(v) != v {
			sem[k] = c.secretValue(v)
		}
	}
}
