// Package shards is the layout of a sharded run's output: each shard's
// directory under the run's root (Dir), and the run manifest at the root
// that every shard of the run checks (Manifest).
package shards
