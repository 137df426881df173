// Package readback reads a run's committed Parquet files back into
// pipeline values: the rollout rows of OUTPUT/data (Dir, File) and the step
// rows of OUTPUT/steps (Steps, StepsFile).
//
// It reads with Arrow's own Parquet reader (pqarrow, through
// internal/pqread), a reader independent of the writer in sinks/parquet,
// so a test that writes with the sink and reads back here checks the files
// rather than the writer against itself. It lives apart from the writer so
// that a plain run, which only writes, does not build Arrow's Parquet
// reader and the gRPC packages it pulls in.
//
// Every function holds the rows it reads in memory: for large outputs
// query the files with DuckDB or pyarrow instead.
package readback
