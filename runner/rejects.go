package runner

import "github.com/trajflow/trajflow/sources"

// rejectLine is one line of the rejects file: a bad row skipped under
// source.on_bad_row: skip.
type rejectLine struct {
	Where  string `json:"where"`
	Reason string `json:"reason"`
	Row    string `json:"row"`
}

// reject records a bad row.
func (r *run) reject(rej sources.Reject) error {
	r.stats.rejected.Add(1)
	return r.rejects.Write(rejectLine{Where: rej.Where, Reason: rej.Reason, Row: string(rej.Raw)})
}
