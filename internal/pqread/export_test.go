package pqread

// BatchFor exposes batchFor to the external tests.
func BatchFor(f *File, leaves map[int]bool) int64 { return f.batchFor(leaves) }
