package runner

import (
	"context"
	"io"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/runner/validate"
)

// DefaultValidateRows is how many rows Validate renders by default.
const DefaultValidateRows = validate.DefaultRows

// ValidateOptions are Validate's settings.
type ValidateOptions struct {
	// Options are a run's options: Client and Env replace the config's
	// endpoints and environment as they do for Run; the rest is ignored.
	Options
	// Rows is how many rows to render and reset the environment on
	// (DefaultValidateRows when 0; a negative value: none, the
	// environment is only started and closed).
	Rows int
	// Out receives the report: the rendered requests, the endpoints and
	// the environment checked; nil discards it.
	Out io.Writer
	// Send sends each rendered row's first request to the endpoints, as
	// the run's first turn would (one generation per row), and reports
	// the answer: a request the server refuses (a prompt and max_tokens
	// over its context, a parameter it does not take) is a problem.
	Send bool
}

// Validate checks everything a run of cfg would check, and goes as far
// as the first requests without writing anything: no output directory, no
// lock, no key file. It
//
//   - checks the config (Check: every section, the environment's name and
//     options, the templates);
//   - reads the first opts.Rows rows and renders each exactly as its first
//     request would be sent (template, repeat, the environment's reset,
//     the generate stage's parameters) and writes it to opts.Out;
//   - checks every endpoint: reachable, the key accepted, the model served
//     (openai.Preflight; the simulator needs none), and with generate.api:
//     tokens, /tokenize and a token-id prompt (the run's start-up check);
//   - starts the environment, resets it on the rendered rows, and closes
//     it (subprocess workers are stopped);
//   - with opts.Send, sends each rendered row's first request.
//
// It walks the build steps Run walks (build.Steps), in Run's order and
// dry (runner/validate), so the rendered request is the one a run sends,
// through the same decorated client: in tokens mode its prompt's token
// ids, and max_tokens capped to the room the row's route's max_seq_len
// leaves.
//
// It reports every problem at once, as a *config.ValidationError whose
// lines name where each key was set; a check whose section of the config
// is already wrong is skipped rather than reported twice. nil means a run
// would start.
func Validate(ctx context.Context, cfg *config.Config, opts ValidateOptions) error {
	return validate.Run(ctx, cfg, validate.Options{Build: opts.Options.buildOptions(), Rows: opts.Rows, Out: opts.Out, Send: opts.Send})
}
