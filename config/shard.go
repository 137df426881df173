package config

import "github.com/trajflow/trajflow/pipeline"

// ResolveShard fills source.shard's index and count from the environment
// (looked up with lookup, e.g. os.LookupEnv) when it is auto (see
// sources.Shard.Resolve). The error is a *ValidationError naming where
// source.shard was set and the variables looked at.
func (c *Config) ResolveShard(lookup func(string) (string, bool)) error {
	s, err := c.Source.Shard.Resolve(lookup)
	if err != nil {
		var p pipeline.Problems
		p.Section("source", err)
		return c.Locate(p.Err())
	}
	c.Source.Shard = s
	return nil
}

// RunFingerprint is Fingerprint without the shard's index: the identity
// that every shard of one sharded run shares (the shard count stays in).
func (c *Config) RunFingerprint() (hash, canonical string) {
	own := *c
	own.Source.Shard.Index = 0
	own.Source.Shard.From = ""
	return own.Fingerprint()
}
