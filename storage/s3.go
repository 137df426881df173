package storage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// ErrAccess marks an error that no retry mends: bad or missing
// credentials, a missing bucket, a refused request, a bad endpoint.
var ErrAccess = errors.New("object storage refused access")

// Env holds the endpoint and credentials of object storage, from the
// standard AWS environment variables.
type Env struct {
	// Endpoint is AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else
	// https://s3.amazonaws.com. Its scheme chooses plain HTTP or TLS.
	Endpoint string
	// Region is AWS_REGION, else AWS_DEFAULT_REGION; empty lets the
	// client ask the store.
	Region string
	// AccessKeyID, SecretAccessKey and SessionToken are AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN; all empty means
	// anonymous requests.
	AccessKeyID, SecretAccessKey, SessionToken string
}

// FromEnv reads the AWS environment variables.
func FromEnv() Env {
	e := Env{
		Endpoint:        firstEnv("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
		Region:          firstEnv("AWS_REGION", "AWS_DEFAULT_REGION"),
		AccessKeyID:     os.Getenv("AWS_ACCESS_KEY_ID"),
		SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken:    os.Getenv("AWS_SESSION_TOKEN"),
	}
	if e.Endpoint == "" {
		e.Endpoint = "https://s3.amazonaws.com"
	}
	return e
}

// SecretEnv are the variables whose values are secrets: the redactor
// removes them from everything trajflow writes.
var SecretEnv = []string{"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// PartSize is the size of a multipart upload's parts: a file larger than
// this is uploaded in parts of this size (S3 allows 10,000 of them, so
// files up to 160 GiB).
const PartSize = 16 << 20

// Store is a client of one S3-compatible store. Its methods take keys
// relative to no prefix: callers join them from a URL.
type Store struct {
	c *minio.Client
	// Retries is how many times an operation is retried on a transient
	// error (beyond the client's own retries of one request), with
	// exponential backoff from Backoff.
	Retries int
	Backoff time.Duration
}

// Open returns a client of the store env names. It contacts nothing.
func Open(env Env) (*Store, error) {
	u, err := url.Parse(env.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("%w: endpoint %q (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL) is not an http:// or https:// URL", ErrAccess, env.Endpoint)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%w: endpoint %q: a path is not supported", ErrAccess, env.Endpoint)
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds:  credentials.NewStaticV4(env.AccessKeyID, env.SecretAccessKey, env.SessionToken),
		Secure: u.Scheme == "https",
		Region: env.Region,
		// Path-style for every endpoint but AWS's and a few others the
		// client knows to take virtual-host requests.
		BucketLookup: minio.BucketLookupAuto,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAccess, err)
	}
	return &Store{c: c, Retries: 5, Backoff: 500 * time.Millisecond}, nil
}

// Object is one listed object.
type Object struct {
	Key  string
	Size int64
}

// Check fails, as ErrAccess, unless the bucket exists and the
// credentials may list it.
func (s *Store) Check(ctx context.Context, bucket string) error {
	return s.retry(ctx, func() error {
		ok, err := s.c.BucketExists(ctx, bucket)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: bucket %q does not exist", ErrAccess, bucket)
		}
		return nil
	})
}

// List lists every object under prefix, recursively, sorted by key.
func (s *Store) List(ctx context.Context, bucket, prefix string) ([]Object, error) {
	var out []Object
	err := s.retry(ctx, func() error {
		out = out[:0]
		for o := range s.c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err != nil {
				return o.Err
			}
			out = append(out, Object{Key: o.Key, Size: o.Size})
		}
		return nil
	})
	return out, err
}

// Put uploads the local file at path as bucket/key. The object appears
// when the upload completes; a file over PartSize goes as a multipart
// upload, which leaves nothing visible when interrupted.
func (s *Store) Put(ctx context.Context, bucket, key, path string) error {
	return s.retry(ctx, func() error {
		_, err := s.c.FPutObject(ctx, bucket, key, path, minio.PutObjectOptions{
			PartSize: PartSize, NumThreads: 2, ContentType: contentType(key),
		})
		return err
	})
}

// Create uploads the local file at path as bucket/key only if no object
// has that key yet (If-None-Match: *); created is false when one had, so
// that of several writers racing for a key one wins and the others read
// its object.
func (s *Store) Create(ctx context.Context, bucket, key, path string) (created bool, err error) {
	err = s.retry(ctx, func() error {
		opts := minio.PutObjectOptions{ContentType: contentType(key)}
		opts.SetMatchETagExcept("*")
		_, err := s.c.FPutObject(ctx, bucket, key, path, opts)
		if minio.ToErrorResponse(err).Code == "PreconditionFailed" {
			created = false
			return nil
		}
		created = err == nil
		return err
	})
	return created, err
}

// Get downloads bucket/key into the local file at path, through a
// temporary file beside it.
func (s *Store) Get(ctx context.Context, bucket, key, path string) error {
	return s.retry(ctx, func() error {
		return s.c.FGetObject(ctx, bucket, key, path, minio.GetObjectOptions{})
	})
}

// Delete removes bucket/key; a missing object is no error.
func (s *Store) Delete(ctx context.Context, bucket, key string) error {
	return s.retry(ctx, func() error {
		return s.c.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{})
	})
}

// AbortIncomplete aborts the multipart uploads under prefix that a
// crashed writer left (they are invisible, but the store keeps their
// parts). Only the holder of the prefix's Lock may call it.
func (s *Store) AbortIncomplete(ctx context.Context, bucket, prefix string) error {
	for u := range s.c.ListIncompleteUploads(ctx, bucket, prefix, true) {
		if u.Err != nil {
			return classify(u.Err)
		}
		if err := s.c.RemoveIncompleteUpload(ctx, bucket, u.Key); err != nil {
			return classify(err)
		}
	}
	return nil
}

func contentType(key string) string {
	switch {
	case strings.HasSuffix(key, ".json"):
		return "application/json"
	case strings.HasSuffix(key, ".jsonl"):
		return "application/jsonl"
	}
	return "application/octet-stream"
}

// retry runs op until it succeeds, fails with an error no retry mends,
// or s.Retries retries are spent, backing off exponentially.
func (s *Store) retry(ctx context.Context, op func() error) error {
	wait := s.Backoff
	for i := 0; ; i++ {
		err := op()
		if err == nil {
			return nil
		}
		err = classify(err)
		if errors.Is(err, ErrAccess) || final(err) || i >= s.Retries || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// fatalCodes are the S3 error codes no retry mends.
var fatalCodes = map[string]bool{
	"AccessDenied": true, "InvalidAccessKeyId": true, "SignatureDoesNotMatch": true,
	"NoSuchBucket": true, "InvalidBucketName": true, "AllAccessDisabled": true,
	"InvalidToken": true, "ExpiredToken": true, "AuthorizationHeaderMalformed": true,
	"AccountProblem": true, "InvalidObjectState": true, "NotImplemented": true,
	"MethodNotAllowed": true, "InvalidArgument": true, "InvalidRequest": true,
	"EntityTooLarge": true, "KeyTooLongError": true, "PreconditionFailed": true,
	"NoSuchKey": true,
}

// classify marks the errors no retry mends with ErrAccess (a missing key
// and a failed precondition stay themselves: callers test for them).
func classify(err error) error {
	if err == nil || errors.Is(err, ErrAccess) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	r := minio.ToErrorResponse(err)
	switch {
	case r.Code == "NoSuchKey" || r.Code == "PreconditionFailed":
		return err
	case fatalCodes[r.Code]:
		return fmt.Errorf("%w: %w", ErrAccess, err)
	case r.StatusCode == 401 || r.StatusCode == 403:
		return fmt.Errorf("%w: %w", ErrAccess, err)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return fmt.Errorf("%w: %w", ErrAccess, err)
	}
	return err
}

// final reports whether err is an answer no retry changes that callers
// test for: a missing object or a failed precondition.
func final(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == "NoSuchKey" || code == "PreconditionFailed"
}

// IsNotFound reports whether err says the object does not exist.
func IsNotFound(err error) bool {
	return minio.ToErrorResponse(err).Code == "NoSuchKey"
}
