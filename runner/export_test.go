package runner

// SetMaxRecordBytes lowers the most text a record batch holds, for tests
// that cannot allocate gigabytes; it returns the function restoring it.
func SetMaxRecordBytes(n int64) (restore func()) {
	old := maxRecordBytes
	maxRecordBytes = n
	return func() { maxRecordBytes = old }
}
