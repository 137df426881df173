package runner

import (
	"context"
	"errors"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/runner/build"
)

// SetMaxRecordBytes lowers the most text a record batch holds, for tests
// that cannot allocate gigabytes; it returns the function restoring it.
func SetMaxRecordBytes(n int64) (restore func()) {
	old := maxRecordBytes
	maxRecordBytes = n
	return func() { maxRecordBytes = old }
}

// Build walks the build steps as Run does, with no output step of its
// own: it gives TestBuild the components a run drives. On an error what
// was built is closed; the caller closes the result.
func Build(ctx context.Context, cfg *config.Config, opts Options) (*build.Components, error) {
	c := build.New(cfg, opts.buildOptions(), build.Hooks{})
	if err := c.Walk(ctx, build.RunStep); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}
