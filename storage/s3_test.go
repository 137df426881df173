package storage

import (
	"errors"
	"fmt"
	"testing"

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
