//go:build !nosync

package durable

import "os"

// SyncsDisabled reports whether this binary was built with the nosync
// build tag (see nosync.go): never in a release or a test build.
const SyncsDisabled = false

// Sync syncs f: its data and metadata reach the disk before it returns.
// Every fsync of trajflow's writers goes through it (or SyncDir), so that
// the benchmark of the cost of durability (bench/powercut) can build a
// binary without them.
func Sync(f *os.File) error { return f.Sync() }

func syncDir(d *os.File) error { return d.Sync() }
