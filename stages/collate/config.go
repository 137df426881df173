package collate

import "github.com/trajflow/trajflow/pipeline"

// Config is the collate stage's part of the output section.
type Config struct {
	// BatchRows is the rows per Arrow record batch (whole groups: a batch
	// never splits a group).
	BatchRows int `yaml:"batch_rows"`
}

// DefaultConfigBatchRows is batch_rows when the config leaves it unset:
// small batches keep a sink's memory low and its commits frequent.
const DefaultConfigBatchRows = 128

// MaxBatchRows bounds batch_rows (records are also cut by bytes).
const MaxBatchRows = 1 << 20

// SetDefaults fills the keys left unset.
func (c *Config) SetDefaults() {
	if c.BatchRows == 0 {
		c.BatchRows = DefaultConfigBatchRows
	}
}

// Validate reports the section's problems.
func (c *Config) Validate() error {
	var p pipeline.Problems
	if c.BatchRows < 1 || c.BatchRows > MaxBatchRows {
		p.Add("batch_rows", "must be between 1 and %d, got %d", MaxBatchRows, c.BatchRows)
	}
	return p.Err()
}
