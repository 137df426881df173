//go:build nosync

package durable

import "os"

// SyncsDisabled: this binary was built with -tags nosync, a benchmarking
// hook only (bench/powercut measures the cost of durability against it).
// A build with it makes nothing durable: a power cut may lose every
// committed file. The trajflow command says so first thing on standard
// error.
const SyncsDisabled = true

// Sync does nothing under the nosync build tag (a benchmarking hook).
func Sync(*os.File) error { return nil }

func syncDir(*os.File) error { return nil }
