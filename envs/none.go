package envs

import (
	"context"

	"github.com/trajflow/trajflow/pipeline"
)

// None is the name of the environment that is no environment: each
// rollout is one generation, ended by the reply, with reward 0. A run of
// an OpenAI Batch file (source.format: openai_batch) without an env
// section uses it.
const None = "none"

func init() {
	Register(None, func(opts Options) (Env, error) {
		var none struct{}
		if err := opts.Decode(&none); err != nil {
			return nil, err
		}
		return noEnv{}, nil
	})
}

// noEnv is the None environment.
type noEnv struct{}

func (noEnv) Reset(ctx context.Context, r *pipeline.Rollout) (*Reset, error) { return &Reset{}, nil }

func (noEnv) Step(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*Step, error) {
	return &Step{Terminated: true}, nil
}
