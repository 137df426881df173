// Package arrowmem is an Arrow memory allocator that recycles the buffers
// Arrow frees, so that a steady stream of record batches (collate's) does
// not allocate, zero and garbage-collect fresh buffers for every batch.
package arrowmem
