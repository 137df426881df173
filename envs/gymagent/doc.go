// Package gymagent is trajflow's "nemo_gym_agent" environment: each
// rollout's row goes to a NeMo Gym agent server (its POST /run), as Gym's
// rollout collection (rollout_collection.py, run_examples) sends it, and
// the agent server calls its model server, which is trajflow's agent
// gateway (POST /v1/responses at the gateway's root, answered as Gym's
// vllm_model answers, token fields included). It implements
// [envs.Agent]: the loop opens a gateway session for the rollout and
// calls Run, which
//
//   - prepares the row as Gym's collection does (nemogym.Request: the
//     config's request parameters laid over responses_create_params, the
//     seed in metadata.extra_body with repeat.add_seed, agent_ref,
//     _ng_task_index and _ng_rollout_index) and puts the session's id in
//     responses_create_params.metadata.trajflow_session, the attribution
//     Gym's simple agent forwards to its model server with every call;
//   - posts it to {agents[agent_ref.name]}/run and reads Gym's run answer
//     (a verify response): its reward is the rollout's, its other numeric
//     and boolean fields (and reward_components.NAME) its metrics.
//
// Finish posts the run's answers, stripped as Gym strips them, to each
// agent's /aggregate_metrics (as _call_aggregate_metrics does).
//
// The gateway must listen on a fixed address (gateway.addr with a port
// other than 0): the agent servers are configured with their model
// server's address before the run. The build step that starts the gateway
// refuses port 0 for this environment (envs.FixedGateway).
package gymagent
