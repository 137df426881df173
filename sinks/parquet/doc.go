// Package parquet commits Arrow record batches in the collate schema to
// Parquet files with parquet-go.
//
// Rows are handed to parquet-go as Go structs whose strings and slices
// point straight at the record's Arrow buffers (no copy); the record may be
// released as soon as Write returns. The structs (row, stepRow) and the
// conversion from records are generated from schema's column tables
// (row_gen.go: go generate ./sinks/parquet); a test fails when the file
// is stale. Step rows come as schema.StepRow (collate.StepRows).
//
// Files are committed atomically (internal/durable): each is written to a
// hidden temporary name (.part-NNNNN.parquet.tmp), flushed, synced,
// closed, renamed to part-NNNNN.parquet and the directory synced. A
// reader never sees a half-written file, and a crash loses only the file
// being written. A record is never split across files, so a file holds
// whole groups when records do (collate never splits a group).
//
//	records:  [r1] [r2] [r3] [r4] [r5]          (FileRows = 2 records' worth)
//	files:    part-00000 = r1 r2, part-00001 = r3 r4, part-00002 = r5 (Close)
package parquet

//go:generate go run ./internal/gen -o row_gen.go
