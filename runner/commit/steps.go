package commit

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
	"github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// stepsKey is the config key of the step rows.
const stepsKey = "output.steps"

// The step rows of the kept trajectories are a part sink: a steps file
// beside each data part, of the same name. It is registered here, not in
// sinks/parquet, because the rows are collated from the groups (package
// collate, a stage a sink does not import).
func init() {
	sinks.RegisterPart(sinks.PartSpec{
		Key:   stepsKey,
		On:    func(s sinks.Settings) bool { on, _ := s.Setting(stepsKey); return on == true },
		Keeps: func(_ sinks.Settings, dest string) bool { return dest == schema.DataDir },
		New: func(env sinks.PartEnv) (sinks.Part, error) {
			return &stepsPart{dir: filepath.Join(env.Dir, schema.StepsDir), compression: env.Compression, metadata: env.Metadata}, nil
		},
		Pair: func(outDir string) error {
			// A crash between a commit's two renames left a steps file
			// without its trajectories: they were never committed.
			if err := parquet.PairSteps(filepath.Join(outDir, schema.DataDir), filepath.Join(outDir, schema.StepsDir)); err != nil {
				return fmt.Errorf("resume: %w", err)
			}
			return nil
		},
	})
}

// stepsPart writes the step rows of the data directory's parts
// (output.steps) through a parquet.StepWriter, opened with the first
// rows staged (the data writer's first batch), as the data writer opens.
type stepsPart struct {
	dir, compression string
	metadata         map[string]string
	w                *parquet.StepWriter
}

var _ sinks.Part = (*stepsPart)(nil)

func (s *stepsPart) open() error {
	if s.w != nil {
		return nil
	}
	w, err := parquet.NewStepWriter(s.dir, s.compression, s.metadata)
	if err != nil {
		return err
	}
	s.w = w
	return nil
}

// Stage writes the groups' step rows to the open steps file.
func (s *stepsPart) Stage(_ context.Context, _ string, _ arrow.Record, groups []*pipeline.Group) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.w.WriteRows(collate.StepRows(nil, groups))
}

// Commit commits the steps file under the data part's name (an empty one
// when the part has no step rows, so that every data part has its file).
func (s *stepsPart) Commit(_, final string) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.w.Commit(filepath.Base(final))
}

// Abort removes the open steps file.
func (s *stepsPart) Abort(string) error {
	if s.w == nil {
		return nil
	}
	return s.w.Abort()
}
