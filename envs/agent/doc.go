// Package agent is trajflow's "agent" environment: an agent program
// trajflow did not write (any language, any SDK) runs once per rollout as
// a process and calls the model itself through the rollout's gateway
// session. It implements [envs.Agent]: the loop opens the session and
// calls Run, which
//
//   - starts env.command in its own process group, with the session's
//     endpoints and key in its environment (OPENAI_BASE_URL,
//     OPENAI_API_KEY, ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY) and the
//     rollout's identity (TRAJFLOW_SESSION, TRAJFLOW_REWARD_URL,
//     TRAJFLOW_TASK_INDEX, TRAJFLOW_ROLLOUT_INDEX, TRAJFLOW_ATTEMPT,
//     TRAJFLOW_SEED, TRAJFLOW_MODEL when the rollout names a model);
//   - writes the task row as one JSON line to its stdin and closes it;
//   - waits for it to exit; at the trajectory's deadline (env.timeout) or
//     a cancel it sends SIGTERM to the process group, and SIGKILL after
//     env.kill_grace;
//   - ends the session, and scores the trajectory: by the environment
//     named in env.verify (its Step scores the last assistant message the
//     session recorded), else by the reward the agent posted to
//     TRAJFLOW_REWARD_URL, else by the agent's last non-empty stdout line,
//     a JSON object {"reward": 1, "metrics": {"acc": 1}}.
//
// A failed rollout carries its error class ([envs.ClassedError]):
// agent_crash (a failure exit status, or the process could not start),
// agent_timeout (killed at the deadline), agent_no_call (exited without
// calling the model), agent_reward (nothing to score it by). Crash and
// timeout errors end with the tail of the agent's stderr (env.stderr_tail
// bytes). Each stderr line is also copied to trajflow's stderr, whole,
// prefixed with the session id, unless env.stderr_passthrough is false.
//
// Leftover children of the agent are stopped when it exits: the process
// group gets SIGTERM, and SIGKILL after env.kill_grace.
package agent
