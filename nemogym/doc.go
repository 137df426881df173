// Package nemogym holds NeMo Gym's rollout shapes, shared by the nemo_gym
// environment (envs/httpenv) and the JSONL sink (sinks/jsonl), so that what
// trajflow sends to a resources server and what it writes are one thing.
//
// A rollout in Gym's shape is the input row (every field kept, the verifier
// fields and agent_ref among them) plus:
//
//   - responses_create_params: the row's, unchanged (CreateParams);
//   - _ng_task_index and _ng_rollout_index (Request);
//   - response: an OpenAI Responses API response whose output holds the
//     trajectory after the prompt as reasoning, message, function_call and
//     function_call_output items, with usage, and status "incomplete" when
//     the last reply was cut (Response).
//
// The conversion follows NeMo Gym's nemo_gym/responses_converter.py
// (chat completion to response) and responses_api_agents/simple_agent/app.py
// (the agent loop). The package imports only pipeline.
package nemogym
