// Package collate turns resolved groups of rollouts into Arrow record
// batches, one row per rollout, in the output schema of package schema.
//
// A batch never splits a group: Add appends every rollout of a group and
// hands out a record once at least batchRows rows are buffered.
//
//	groups:  [a a a] [b b b] [c c c] [d d d]        (batchRows = 5)
//	records:             [a a a b b b]      [c c c d d d]
//
// Records follow Arrow's ownership rules: the caller owns each record it
// receives and must Release it.
package collate
