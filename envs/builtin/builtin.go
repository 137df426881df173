package builtin

import (
	_ "github.com/trajflow/trajflow/envs/agent"      // "agent"
	_ "github.com/trajflow/trajflow/envs/grid"       // "grid"
	_ "github.com/trajflow/trajflow/envs/guess"      // "guess"
	_ "github.com/trajflow/trajflow/envs/gymagent"   // "nemo_gym_agent"
	_ "github.com/trajflow/trajflow/envs/httpenv"    // "http"
	_ "github.com/trajflow/trajflow/envs/math"       // "math"
	_ "github.com/trajflow/trajflow/envs/sim"        // "sim"
	_ "github.com/trajflow/trajflow/envs/subprocess" // "subprocess"
	_ "github.com/trajflow/trajflow/envs/tools"      // "tools"
)
