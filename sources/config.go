package sources

import (
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// Config is the source section: where tasks come from and which of them a
// run reads.
type Config struct {
	// Path is a .jsonl (or .jsonl.gz) or .parquet file.
	Path string `yaml:"path"`
	// Format overrides the format the path's extension implies: jsonl, parquet.
	Format string `yaml:"format"`
	// Limit reads at most this many tasks (0: all).
	Limit int64 `yaml:"limit"`
	// Offset skips this many rows first; their task_index still counts.
	Offset int64 `yaml:"offset"`
	// OnBadRow is error (stop at the first bad row) or skip (write it to the
	// rejects file and go on).
	OnBadRow string `yaml:"on_bad_row"`
	// Shard selects rows with task_index % shard.count == shard.index.
	// "auto" takes the index and count from the scheduler's environment
	// (Shard.Resolve).
	Shard Shard `yaml:"shard"`
	// TaskIndex numbers the tasks: line (default: the row's 0-based
	// position) or dedup (NeMo Gym's _ng_task_index: identical rows, by
	// canonical JSON, are one task numbered in order of first appearance;
	// a later copy is passed over).
	TaskIndex string `yaml:"task_index"`
	// MaxLineBytes bounds one line of a JSONL input, in bytes (default 64
	// MiB, at most 2 GiB). A longer line is never held in memory: it is a
	// bad row naming its file and line (skipped into the rejects file,
	// cut to its first KiB, under on_bad_row: skip).
	MaxLineBytes int64 `yaml:"max_line_bytes"`
}

// DefaultMaxLineBytes is source.max_line_bytes when unset; MaxMaxLineBytes
// its upper bound.
const (
	DefaultMaxLineBytes int64 = 64 << 20
	MaxMaxLineBytes     int64 = 2 << 30
)

// Task index modes.
const (
	TaskIndexLine  = "line"
	TaskIndexDedup = "dedup"
)

// SetDefaults fills the keys left unset.
func (c *Config) SetDefaults() {
	if c.OnBadRow == "" {
		c.OnBadRow = "error"
	}
	if c.Shard.Count == 0 && !c.Shard.Auto {
		c.Shard.Count = 1
	}
	if c.TaskIndex == "" {
		c.TaskIndex = TaskIndexLine
	}
	if c.MaxLineBytes == 0 {
		c.MaxLineBytes = DefaultMaxLineBytes
	}
}

// Validate reports every problem of the section at once, each naming its
// key relative to the section.
func (c *Config) Validate() error {
	var p pipeline.Problems
	if c.Path == "" {
		p.Add("path", "required (a .jsonl or .parquet file)")
	}
	if c.Format != "" {
		p.OneOf("format", c.Format, FormatJSONL, FormatParquet)
	} else if c.Path != "" {
		if _, err := formatOf(*c); err != nil {
			p.Add("path", "%s", strings.TrimPrefix(err.Error(), "source.path: "))
		}
	}
	if c.Limit < 0 {
		p.Add("limit", "must be >= 0, got %d", c.Limit)
	}
	if c.Offset < 0 {
		p.Add("offset", "must be >= 0, got %d", c.Offset)
	}
	p.OneOf("on_bad_row", c.OnBadRow, "error", "skip")
	if c.TaskIndex != "" {
		p.OneOf("task_index", c.TaskIndex, TaskIndexLine, TaskIndexDedup)
	}
	if c.MaxLineBytes < 0 || c.MaxLineBytes > MaxMaxLineBytes {
		p.Add("max_line_bytes", "must be between 1 and %d (2 GiB), got %d", MaxMaxLineBytes, c.MaxLineBytes)
	}
	c.Shard.validate(&p)
	return p.Err()
}
