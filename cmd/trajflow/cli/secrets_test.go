package cli_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trajflow/trajflow/cmd/trajflow/cli"
)

// TestMain doubles as a subprocess environment (TRAJFLOW_CLI_HELPER=env):
// it answers every step with reward 1, except that odd trajectories fail
// with a message quoting the secret variable it was handed.
func TestMain(m *testing.M) {
	if os.Getenv("TRAJFLOW_CLI_HELPER") == "env" {
		helperEnv()
		return
	}
	os.Exit(m.Run())
}

func helperEnv() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 64<<20)
	for in.Scan() {
		var req struct {
			ID     int64  `json:"id"`
			Op     string `json:"op"`
			TrajID string `json:"traj_id"`
		}
		json.Unmarshal(in.Bytes(), &req)
		resp := map[string]any{"id": req.ID}
		if req.Op == "step" {
			if strings.HasSuffix(req.TrajID, "r1") {
				resp["error"] = "cannot log in with " + os.Getenv("MY_TOKEN")
			} else {
				resp["reward"], resp["terminated"] = 1, true
			}
		}
		b, _ := json.Marshal(resp)
		fmt.Printf("%s\n", b)
	}
}

// Secrets, one per place of the config that can hold one; a leak names
// its origin.
const (
	secretHeader   = "hdr-secret-9f2c41"
	secretEnvVar   = "envvar-secret-71ab3e"
	secretURLPass  = "urlpass-secret-5d90aa"
	secretURLQuery = "urlquery-secret-c3e817"
	secretParam    = "param-secret-0b6d22"
	secretAPIKey   = "apikey-secret-e45f9c"
	secretS3       = "s3-secret-a81f0d"
)

var allSecrets = []string{secretHeader, secretEnvVar, secretURLPass, secretURLQuery, secretParam, secretAPIKey, secretS3}

// scan fails the test if any secret appears in any file under dir or in
// the captured output.
func scan(t *testing.T, dir string, outputs ...*bytes.Buffer) {
	t.Helper()
	files := 0
	if dir == "" {
		files = -1
		dir = t.TempDir()
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for _, s := range allSecrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds the secret %s", path, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 { // -1: no directory to scan
		t.Fatalf("no files under %s", dir)
	}
	for i, o := range outputs {
		for _, s := range allSecrets {
			if strings.Contains(o.String(), s) {
				t.Errorf("output %d holds the secret %s:\n%s", i, s, o)
			}
		}
	}
}

// No secret is ever written: a secret planted in every config place that
// can hold one (env.headers, a subprocess's env variables, endpoint and
// env URLs' user info and query, generate.params keys, the API key's
// variable) appears in no byte of the output directory, stdout or stderr,
// even where a server or an environment echoes it back in an error.
func TestNoSecretInAnyOutput(t *testing.T) {
	t.Setenv("TRAJFLOW_TEST_API_KEY", secretAPIKey)
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks.jsonl")
	var rows strings.Builder
	for i := range 6 {
		fmt.Fprintf(&rows, `{"question": "%d+1", "expected_answer": "%d"}`+"\n", i, i+1)
	}
	if err := os.WriteFile(tasks, []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Every sink writes: data, filtered, JSONL, an Arrow stream, failures.
	// keep: all writes the groups without a failed member to data/ and
	// metrics.json, those with one to errors/; nonzero_std drops groups
	// into filtered/.
	keep := "all"
	head := func(out string) string {
		return fmt.Sprintf(`source: {path: %s}
prompt: {user: "Solve: {question}"}
repeat: {n: 2}
groups: {keep: %s}
output: {dir: %s, filtered: true, jsonl: true, arrow_stream: %s}
`, tasks, keep, out, filepath.Join(out, "stream.arrows"))
	}
	main := func(args ...string) (code int, stdout, stderr *bytes.Buffer) {
		stdout, stderr = &bytes.Buffer{}, &bytes.Buffer{}
		code = cli.Main(append([]string{"run", "--quiet"}, args...), stdout, stderr)
		return code, stdout, stderr
	}

	t.Run("http env headers and URL, params, API key variable", func(t *testing.T) {
		// The environment server echoes the Authorization header back in
		// the errors of two odd trajectories (their groups go to errors/,
		// the others to data/, and the resume redoes the two).
		var echoed atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/reset" {
				w.Write([]byte(`{}`))
				return
			}
			var req struct {
				TrajID string `json:"traj_id"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			if strings.HasSuffix(req.TrajID, "r1") && echoed.Add(1) <= 2 {
				json.NewEncoder(w).Encode(map[string]string{"error": "token refused: " + r.Header.Get("Authorization")})
				return
			}
			w.Write([]byte(`{"reward": 1, "terminated": true}`))
		}))
		defer srv.Close()
		envURL := strings.Replace(srv.URL, "http://", "http://envuser:"+secretURLPass+"@", 1)
		out := filepath.Join(dir, "out-http")
		cfg := write("http.yaml", head(out)+fmt.Sprintf(`generate:
  endpoints: ["sim://"]
  api_key_env: TRAJFLOW_TEST_API_KEY
  params: {temperature: 1.0, api_key: %s}
env:
  name: http
  url: %s
  headers: {Authorization: "Bearer %s", X-Extra: "%s"}
`, secretParam, envURL, secretHeader, secretAPIKey))
		code, stdout, stderr := main(cfg)
		if code != cli.ExitOK {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		scan(t, out, stdout, stderr)
		if _, err := os.Stat(filepath.Join(out, "metrics.json")); err != nil {
			t.Errorf("metrics.json was not written, so not scanned: %v", err)
		}
		failures, _ := os.ReadFile(filepath.Join(out, "failures.jsonl"))
		if !bytes.Contains(failures, []byte("token refused: [REDACTED]")) {
			t.Errorf("failures.jsonl lacks the redacted echo:\n%s", failures)
		}
		// A resume over the same directory reads the keyed fingerprint back.
		code, stdout, stderr = main(cfg)
		if code != cli.ExitOK || !strings.Contains(stdout.String(), "resumed") {
			t.Fatalf("resume: exit %d\n%s\n%s", code, stdout, stderr)
		}
		scan(t, out, stdout, stderr)
	})

	t.Run("subprocess env variables", func(t *testing.T) {
		keep = "nonzero_std"
		out := filepath.Join(dir, "out-subprocess")
		cfg := write("sub.yaml", head(out)+fmt.Sprintf(`env:
  name: subprocess
  command: [%q, "-test.run=^$"]
  workers: 2
  env: {TRAJFLOW_CLI_HELPER: env, MY_TOKEN: %s}
`, os.Args[0], secretEnvVar))
		code, stdout, stderr := main(cfg)
		if code != cli.ExitOK {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		scan(t, out, stdout, stderr)
		failures, _ := os.ReadFile(filepath.Join(out, "failures.jsonl"))
		if !bytes.Contains(failures, []byte("cannot log in with [REDACTED]")) {
			t.Errorf("failures.jsonl lacks the redacted echo:\n%s", failures)
		}
	})

	t.Run("endpoint URL user info and query", func(t *testing.T) {
		// A server that refuses the key, echoing it and the URL it got.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{
				"message": "bad key " + r.Header.Get("Authorization") + " for " + r.URL.String()}})
		}))
		defer srv.Close()
		withPass := strings.Replace(srv.URL, "http://", "http://user:"+secretURLPass+"@", 1)
		gen := func(endpoint string) string {
			return fmt.Sprintf("generate:\n  endpoints: [%q]\n  api_key_env: TRAJFLOW_TEST_API_KEY\n  max_attempts: 1\n", endpoint)
		}
		tests := []struct {
			name, gen string
			codes     []int
		}{
			// Config errors quote the endpoint.
			{"scheme", gen("ftp://user:" + secretURLPass + "@h/v1?api-key=" + secretURLQuery), []int{cli.ExitUsage}},
			{"query", gen(withPass + "/v1?api-key=" + secretURLQuery), []int{cli.ExitUsage, cli.ExitFailed}},
			// A real run whose endpoint check fails with the echo (exit 4).
			{"run", gen(withPass + "/v1"), []int{cli.ExitErrors}},
		}
		for _, tt := range tests {
			out := filepath.Join(dir, "out-endpoint-"+tt.name)
			code, stdout, stderr := main(write(tt.name+".yaml", head(out)+tt.gen))
			ok := false
			for _, c := range tt.codes {
				ok = ok || c == code
			}
			if !ok {
				t.Errorf("%s: exit %d, want one of %v\n%s\n%s", tt.name, code, tt.codes, stdout, stderr)
			}
			failures, _ := os.ReadFile(filepath.Join(out, "failures.jsonl"))
			if !strings.Contains(stdout.String()+stderr.String()+string(failures), "[REDACTED]") {
				t.Errorf("%s: nothing redacted, so nothing was tested:\n%s\n%s", tt.name, stdout, stderr)
			}
			if _, err := os.Stat(out); err == nil {
				scan(t, out, stdout, stderr)
			} else {
				scan(t, "", stdout, stderr) // nothing written
			}
		}
	})
	t.Run("object storage secret", func(t *testing.T) {
		// A store that has the bucket but refuses every write with a
		// message quoting the secret the client holds.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method == http.MethodHead && !strings.Contains(strings.Trim(r.URL.Path, "/"), "/"),
				r.Method == http.MethodGet && r.URL.Query().Has("location"):
				w.WriteHeader(http.StatusOK) // the bucket is there
				return
			case r.Method == http.MethodHead:
				w.WriteHeader(http.StatusNotFound)
				return
			case r.Method == http.MethodGet:
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusNotFound)
				fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>no such key</Message></Error>`)
				return
			}
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>secret %s is not allowed to write</Message></Error>`, secretS3)
		}))
		defer srv.Close()
		t.Setenv("AWS_ENDPOINT_URL", srv.URL)
		t.Setenv("AWS_ENDPOINT_URL_S3", "")
		t.Setenv("AWS_ACCESS_KEY_ID", "test-id")
		t.Setenv("AWS_SECRET_ACCESS_KEY", secretS3)
		t.Setenv("AWS_SESSION_TOKEN", "")
		t.Setenv("AWS_REGION", "us-east-1")
		code, stdout, stderr := main(write("s3.yaml", strings.Replace(head("s3://trajflow-bucket/out"), "arrow_stream: "+filepath.Join("s3://trajflow-bucket/out", "stream.arrows"), "arrow_stream: "+filepath.Join(dir, "s3.arrows"), 1)))
		if code != cli.ExitErrors || !strings.Contains(stderr.String(), "output.dir s3://trajflow-bucket/out") {
			t.Fatalf("exit %d, want %d naming output.dir\n%s\n%s", code, cli.ExitErrors, stdout, stderr)
		}
		if !strings.Contains(stderr.String(), "secret [REDACTED] is not allowed") {
			t.Errorf("the store's echo was not redacted, so nothing was tested:\n%s", stderr)
		}
		scan(t, "", stdout, stderr)
	})
}
