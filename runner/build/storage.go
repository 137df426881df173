package build

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/trajflow/trajflow/storage"
)

// ErrStorage is returned when object storage refuses the run: bad or
// missing credentials, a missing bucket, a bad endpoint. The command
// exits 4, as for endpoints that cannot serve the run.
var ErrStorage = errors.New("the object storage cannot serve the run")

// StoreError wraps an object storage error for the command: an error no
// retry mends exits 4 naming the config key.
func StoreError(key, where string, err error) error {
	if errors.Is(err, storage.ErrAccess) || errors.Is(err, storage.ErrLocked) {
		if errors.Is(err, storage.ErrLocked) {
			return fmt.Errorf("%s %s is %w", key, where, err)
		}
		return fmt.Errorf("%w: %s %s: %w", ErrStorage, key, where, err)
	}
	return fmt.Errorf("%s %s: %w", key, where, err)
}

// OpenStore opens the store the AWS_* environment variables name.
func OpenStore(key, where string) (*storage.Store, error) {
	s, err := storage.Open(storage.FromEnv())
	if err != nil {
		return nil, StoreError(key, where, err)
	}
	return s, nil
}

// FetchSource downloads source.path p, when an s3:// URL, into the
// directory staging returns and returns the local copy's path; a local
// path is returned as it is.
func FetchSource(ctx context.Context, p string, staging func() (string, error)) (string, error) {
	if !storage.IsURL(p) {
		return p, nil
	}
	u, err := storage.ParseURL(p)
	if err != nil {
		return "", fmt.Errorf("source.path: %w", err)
	}
	s, err := OpenStore("source.path", p)
	if err != nil {
		return "", err
	}
	root, err := staging()
	if err != nil {
		return "", fmt.Errorf("source.path: staging directory: %w", err)
	}
	dir := filepath.Join(root, "source")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("source.path: %w", err)
	}
	local, err := s.Download(ctx, u, dir)
	if err != nil {
		return "", StoreError("source.path", p, err)
	}
	return local, nil
}
