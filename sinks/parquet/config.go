package parquet

import (
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// DefaultCommitInterval is output.commit_interval's default.
const DefaultCommitInterval = time.Minute

// MaxCommitInterval bounds output.commit_interval: the finished work a
// kill -9 may lose.
const MaxCommitInterval = 24 * time.Hour

// Config is the Parquet sink's part of the output section.
type Config struct {
	// FileRows rotates a Parquet part file after this many rows.
	FileRows int `yaml:"file_rows"`
	// FileBytes also rotates a part file once it holds about this many
	// bytes.
	//
	// Default: `536870912` (512 MiB).
	FileBytes int64 `yaml:"file_bytes"`
	// RowGroupRows bounds the rows of one Parquet row group (a row
	// group also ends once it holds 64 MiB of text).
	//
	// Default: `4096`.
	RowGroupRows int `yaml:"row_group_rows"`
	// Compression is the Parquet codec: zstd, snappy, gzip or none.
	Compression string `yaml:"compression"`
	// CommitInterval commits the open part file (and the partial record
	// batch collate holds) at least this often, whatever FileRows, so that
	// a kill -9 loses at most this much finished work (at most 24h).
	// Compact the small files afterwards with trajflow merge.
	CommitInterval pipeline.Duration `yaml:"commit_interval"`
}

// SetDefaults fills the keys left unset.
func (c *Config) SetDefaults() {
	if c.FileRows == 0 {
		c.FileRows = 100_000
	}
	if c.Compression == "" {
		c.Compression = "zstd"
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = pipeline.Duration(DefaultCommitInterval)
	}
}

// Validate reports every problem of the section at once.
func (c *Config) Validate() error {
	var p pipeline.Problems
	if c.FileRows < 1 {
		p.Add("file_rows", "must be >= 1, got %d", c.FileRows)
	}
	if c.FileBytes < 0 {
		p.Add("file_bytes", "must be >= 0, got %d", c.FileBytes)
	}
	if c.RowGroupRows < 0 {
		p.Add("row_group_rows", "must be >= 0, got %d", c.RowGroupRows)
	}
	p.OneOf("compression", c.Compression, "zstd", "snappy", "gzip", "none")
	if d := c.CommitInterval.D(); d < 0 || d > MaxCommitInterval {
		p.Add("commit_interval", "must be > 0 and at most %s, got %s", MaxCommitInterval, d)
	}
	return p.Err()
}

// Options returns the writer options of the config; the caller adds the
// metadata and the commit callback.
func (c *Config) Options() Options {
	return Options{FileRows: c.FileRows, FileBytes: c.FileBytes, RowGroupRows: c.RowGroupRows, Compression: c.Compression}
}
