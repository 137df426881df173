// Package storage puts a run's output in, and reads its input from,
// S3-compatible object storage (AWS S3, MinIO, Ceph RGW, GCS's XML API,
// ...) named by s3://bucket/prefix URLs.
//
// An object appears only when its upload completes (a single PUT, or the
// completion of a multipart upload), so a reader never sees part of a
// file: committing a file is uploading it whole. The runner keeps a run's
// working files in a local staging directory (Mirror), uploads each file
// when it commits, and downloads what earlier runs committed before it
// resumes. A Lock object, created with a conditional PUT (If-None-Match)
// and renewed as a lease, keeps two runs off one prefix.
//
// Endpoint and credentials come from the standard AWS environment
// variables (FromEnv); they are never written anywhere.
package storage
