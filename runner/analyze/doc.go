// Package analyze implements trajflow's commands over committed output:
// Stats computes a run's aggregate metrics from its Parquet files, Merge
// combines part files of one or several runs or shards into fewer, larger
// files.
//
// Both read with Arrow's Parquet reader (pqarrow), one record batch at a
// time, never a whole file. Stats reads only the light columns its metrics
// need. Paths name Parquet files or output directories: a directory stands
// for every data/part-*.parquet under it, or, when it has no data/
// directory with parts, every *.parquet directly in it.
package analyze
