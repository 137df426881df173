// Package pqread reads Parquet files with Arrow's Parquet reader (pqarrow)
// so that a fault of the reader is an error naming the file and column,
// never a crash.
//
// Arrow's reader panics on some files it cannot read (it reported a page
// whose header is over its 4 MiB limit as the end of the column, and then
// failed assembling a struct from children of different lengths), and it
// can end a column early without an error. Records reads one top-level
// column at a time on the calling goroutine, recovers a panic into a
// *ReadError, checks that every column yields the same number of rows and
// that the file yields every row its footer declares.
//
// What cannot be caught: Arrow loads the children of a struct column on
// goroutines of its own; a panic there still ends the process.
package pqread
