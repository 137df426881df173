package sim

// Trailer is what a simulated reply tells the sim environment about the
// workload, so that every schedule under test faces the same work. Over HTTP
// it travels as the response's top-level "sim_trailer" field.
type Trailer struct {
	// TurnsLeft is the number of turns this trajectory has after this one.
	TurnsLeft int `json:"turns_left"`
	// EnvDelayMs is how long the environment step after this turn takes, in
	// milliseconds of simulated time (already multiplied by the time scale).
	EnvDelayMs float64 `json:"env_delay_ms"`
	// ObsTokens is the length of the observation the environment returns.
	ObsTokens int `json:"obs_tokens"`
	// Correct says whether this trajectory's final answer is right.
	Correct bool `json:"correct"`
}
