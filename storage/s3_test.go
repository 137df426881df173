package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

func TestFromEnv(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL", "http://general:9000")
	t.Setenv("AWS_ENDPOINT_URL_S3", "http://s3-only:9000")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "eu-west-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "id")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	e := FromEnv()
	if e.Endpoint != "http://s3-only:9000" || e.Region != "eu-west-1" || e.AccessKeyID != "id" || e.SecretAccessKey != "secret" {
		t.Fatalf("FromEnv = %+v", e)
	}
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	if e := FromEnv(); e.Endpoint != "https://s3.amazonaws.com" {
		t.Fatalf("default endpoint %q", e.Endpoint)
	}
}

func TestOpenEndpoint(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		ok       bool
	}{
		{"http://127.0.0.1:9000", true},
		{"https://s3.example.com", true},
		{"127.0.0.1:9000", false},
		{"ftp://x", false},
		{"http://host:9000/sub", false},
	} {
		_, err := Open(Env{Endpoint: tc.endpoint})
		if (err == nil) != tc.ok {
			t.Errorf("Open(%q) = %v, want ok=%v", tc.endpoint, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrAccess) {
			t.Errorf("Open(%q) = %v, not ErrAccess", tc.endpoint, err)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err   error
		fatal bool
	}{
		{minio.ErrorResponse{Code: "InvalidAccessKeyId", StatusCode: 403}, true},
		{minio.ErrorResponse{Code: "SignatureDoesNotMatch", StatusCode: 403}, true},
		{minio.ErrorResponse{Code: "NoSuchBucket", StatusCode: 404}, true},
		{minio.ErrorResponse{Code: "Whatever", StatusCode: 401}, true},
		{minio.ErrorResponse{Code: "SlowDown", StatusCode: 503}, false},
		{minio.ErrorResponse{Code: "InternalError", StatusCode: 500}, false},
		{minio.ErrorResponse{Code: "NoSuchKey", StatusCode: 404}, false},
		{fmt.Errorf("connection reset by peer"), false},
	} {
		if got := errors.Is(classify(tc.err), ErrAccess); got != tc.fatal {
			t.Errorf("classify(%v) fatal=%v, want %v", tc.err, got, tc.fatal)
		}
	}
}

// A store's transient errors are retried until the upload goes through;
// an error no retry mends fails at the first answer, as ErrAccess.
func TestPutRetriesTransientFailsFastOnAccess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "part-00000.parquet")
	if err := os.WriteFile(path, []byte("committed bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		failures  int // answers of the failing kind before a success
		status    int
		code      string
		wantErr   error
		wantCalls int
	}{
		{"slow down then ok", 3, http.StatusServiceUnavailable, "SlowDown", nil, 4},
		{"internal error then ok", 2, http.StatusInternalServerError, "InternalError", nil, 3},
		{"bad key", 1000, http.StatusForbidden, "InvalidAccessKeyId", ErrAccess, 1},
		{"no bucket", 1000, http.StatusNotFound, "NoSuchBucket", ErrAccess, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			var body []byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPut {
					t.Errorf("unexpected %s %s", r.Method, r.URL)
				}
				if int(calls.Add(1)) <= tc.failures {
					w.Header().Set("Content-Type", "application/xml")
					w.WriteHeader(tc.status)
					fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>m</Message></Error>`, tc.code)
					return
				}
				body, _ = io.ReadAll(r.Body)
				w.Header().Set("ETag", `"abc"`)
				w.WriteHeader(http.StatusOK)
			}))
			defer srv.Close()
			s, err := Open(Env{Endpoint: srv.URL, Region: "us-east-1", AccessKeyID: "id", SecretAccessKey: "secret"})
			if err != nil {
				t.Fatal(err)
			}
			s.Backoff = time.Millisecond
			err = s.Put(context.Background(), "bucket", "out/data/part-00000.parquet", path)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Put = %v, want %v", err, tc.wantErr)
			}
			if got := int(calls.Load()); got != tc.wantCalls {
				t.Errorf("%d requests, want %d", got, tc.wantCalls)
			}
			if tc.wantErr == nil && !strings.Contains(string(body), "committed bytes") { // aws-chunked over plain HTTP
				t.Errorf("the store got %q", body)
			}
		})
	}
}

func TestMissingObjectIsNotRetried(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusNotFound)
		if r.Method != http.MethodHead {
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>no</Message></Error>`)
		}
	}))
	defer srv.Close()
	s, err := Open(Env{Endpoint: srv.URL, AccessKeyID: "id", SecretAccessKey: "secret", Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Get(context.Background(), "bucket", "k", filepath.Join(t.TempDir(), "k"))
	if !IsNotFound(err) {
		t.Fatalf("Get of a missing object: %v, want NoSuchKey", err)
	}
	if n := requests.Load(); n > 2 {
		t.Fatalf("Get of a missing object took %d requests: a missing object was retried", n)
	}
}

// TestMirrorPushOrder: side files go up first, then the Parquet files with
// the data directory's last (a data file's commit stands for its steps
// file), and files being written stay local.
func TestMirrorPushOrder(t *testing.T) {
	var mu sync.Mutex
	var puts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			mu.Lock()
			puts = append(puts, strings.TrimPrefix(r.URL.Path, "/bucket/run/"))
			mu.Unlock()
			io.Copy(io.Discard, r.Body)
			w.Header().Set("ETag", `"0"`)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	s, err := Open(Env{Endpoint: srv.URL, AccessKeyID: "id", SecretAccessKey: "secret", Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	local := t.TempDir()
	for _, name := range []string{"data/part-00000.parquet", "steps/part-00000.parquet", "inputs.jsonl", "images/ab.png",
		"data/.part-00001.parquet.tmp", "images/.tmp-image-1", "shards/00000-of-00002/.shard.json.tmp-7"} {
		p := filepath.Join(local, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	u, err := ParseURL("s3://bucket/run")
	if err != nil {
		t.Fatal(err)
	}
	n, err := (&Mirror{Store: s, URL: u, Local: local, Last: "data"}).Push(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := "images/ab.png,inputs.jsonl,steps/part-00000.parquet,data/part-00000.parquet"
	if got := strings.Join(puts, ","); got != want || n != 4 {
		t.Fatalf("uploaded %d: %s\nwant %s", n, got, want)
	}
}
