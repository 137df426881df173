package parquet

// SetTextBounds lowers the text a write hands the Parquet writer at once
// and the text of a row group, for tests that cannot write hundreds of
// MiB; it returns the function restoring them.
func SetTextBounds(chunk, group int) (restore func()) {
	oldChunk, oldGroup := writeChunkBytes, rowGroupBytes
	writeChunkBytes, rowGroupBytes = chunk, group
	return func() { writeChunkBytes, rowGroupBytes = oldChunk, oldGroup }
}
