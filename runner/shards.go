package runner

import (
	"errors"

	"github.com/trajflow/trajflow/runner/build"
	"github.com/trajflow/trajflow/runner/resume"
)

// ErrManifest is returned when a run does not belong to the run whose
// manifest its output directory holds (resume.ErrManifest).
var ErrManifest = resume.ErrManifest

// ErrStorage is returned when object storage refuses the run: bad or
// missing credentials, a missing bucket, a bad endpoint
// (build.ErrStorage). The command exits 4.
var ErrStorage = build.ErrStorage

// writeShardStatus records, in a sharded run's shard directory, whether
// this run read its input to the end.
func (r *run) writeShardStatus(err error) error {
	complete := err == nil || errors.Is(err, ErrShortOfData)
	stop := ""
	if !complete {
		stop = r.built.Red.String(err.Error())
	}
	return resume.WriteShardStatus(r.cfg, complete, stop)
}
