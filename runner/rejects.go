package runner

import (
	"github.com/trajflow/trajflow/sinks/lines"
	"github.com/trajflow/trajflow/sources"
)

// reject records a bad row.
func (r *run) reject(rej sources.Reject) error {
	r.stats.rejected.Add(1)
	return r.rejects.Write(lines.Reject{Where: rej.Where, Reason: rej.Reason, Row: string(rej.Raw)})
}
