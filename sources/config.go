package sources

import (
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// Config is the source section: where tasks come from and which of them a
// run reads.
type Config struct {
	// Path is the input: a .jsonl, .jsonl.gz or .parquet file, streamed;
	// or s3://bucket/key of one in object storage (downloaded first,
	// docs/storage.md). Required.
	Path string `yaml:"path"`
	// Format overrides the format the path's extension implies: jsonl or
	// parquet; or openai_batch, OpenAI's Batch input file (a JSONL file of
	// {custom_id, method, url, body}, also vLLM's run-batch input): each
	// line's custom_id names its row (a duplicate stops the run, naming both
	// lines), its url (/v1/chat/completions or /v1/completions) chooses the
	// API of its request, its body gives the messages or prompt and the
	// row's params (the body's model is not sent: generate.model is); a
	// line with another url, method or stream: true is an error row naming
	// the line, and the run goes on. Without an env section each row is one
	// generation with no environment (env.name none, reward 0). See
	// docs/offline.md.
	//
	// Default: from the extension.
	Format string `yaml:"format"`
	// Limit reads at most this many rows, after Offset (0: all).
	Limit int64 `yaml:"limit"`
	// Offset skips this many rows first; their task_index still counts.
	Offset int64 `yaml:"offset"`
	// OnBadRow is error (stop at the first bad row, naming its file and
	// line) or skip (write it with the reason to OUTPUT/rejects.jsonl and go
	// on). Invalid UTF-8 is not a bad row: it is replaced by U+FFFD and
	// counted (docs/sources.md).
	OnBadRow string `yaml:"on_bad_row"`
	// Shard keeps the rows with task_index % count == index. "auto" takes
	// the index and count from the scheduler: SLURM_ARRAY_TASK_ID with
	// SLURM_ARRAY_TASK_COUNT (or SLURM_ARRAY_TASK_MIN/MAX), Kubernetes'
	// JOB_COMPLETION_INDEX with shard.count or TRAJFLOW_SHARD_COUNT, or
	// RANK with WORLD_SIZE ({auto: true, count: 16} gives the count in the
	// config). A sharded run (auto, or count > 1) writes under
	// OUTPUT/shards/SSSSS-of-NNNNN/: see docs/shards.md, and docs/scale.md
	// for when one process is not enough.
	//
	// Default: `{index: 0, count: 1}`.
	Shard Shard `yaml:"shard"`
	// TaskIndex numbers the tasks: line (default: the row's 0-based
	// position), dedup (identical rows, by canonical JSON, are one task
	// numbered in order of first appearance; a later copy is passed over)
	// or dedup_lines (the same, identical meaning byte for byte, as NeMo
	// Gym's _ng_task_index compares the raw lines: rows differing only in
	// key order or spacing are two tasks).
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
	// TaskIndexDedupLines numbers as dedup, comparing rows byte for byte.
	TaskIndexDedupLines = "dedup_lines"
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
		p.OneOf("format", c.Format, FormatJSONL, FormatParquet, FormatOpenAIBatch)
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
		p.OneOf("task_index", c.TaskIndex, TaskIndexLine, TaskIndexDedup, TaskIndexDedupLines)
	}
	if c.MaxLineBytes < 0 || c.MaxLineBytes > MaxMaxLineBytes {
		p.Add("max_line_bytes", "must be between 1 and %d (2 GiB), got %d", MaxMaxLineBytes, c.MaxLineBytes)
	}
	c.Shard.validate(&p)
	return p.Err()
}
