package runner

import (
	"fmt"

	"github.com/trajflow/trajflow/sinks/lines"
	"github.com/trajflow/trajflow/sources"
)

// reject records a bad row.
func (r *run) reject(rej sources.Reject) error {
	r.stats.Rejected()
	return r.side.rejects.Write(lines.Reject{Where: rej.Where, Reason: rej.Reason, Row: string(rej.Raw)})
}

// invalidUTF8 counts an input row whose invalid UTF-8 the source replaced;
// the first one is named on stderr.
func (r *run) invalidUTF8(where string) {
	if r.stats.InvalidUTF8() == 1 {
		fmt.Fprintf(r.opts.Stderr, "trajflow: %s: invalid UTF-8 replaced by U+FFFD (further rows are counted in the summary)\n", where)
	}
}
