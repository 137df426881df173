// Package jsonl writes rollouts as JSON lines in NeMo Gym's rollout shape,
// one per rollout, from Arrow records in the collate schema or from groups.
// A run hands it its kept groups (Writer.WriteGroups, a sinks.GroupSink):
// the lines are those of the record collate makes of them, byte for byte,
// without the record being decoded.
//
// A line is what Gym's rollout collection writes: the input row's fields
// at the top level (verifier fields, agent_ref), responses_create_params
// as sent (the row's own, unchanged; built from the rendered prompt for a
// row without one), _ng_task_index, _ng_rollout_index, reward, and
// response in the Responses API shape (reasoning, message, function_call
// and function_call_output items, usage, status), built by package
// nemogym, as the nemo_gym environment sends it to /verify. trajflow's own
// fields (run_id, traj_id, attempt, seed, status, error, finish_reason,
// metrics, turn_rewards, num_turns, ...) are under "trajflow".
//
// A line fed back as input renders the same prompt.
//
// Parts is output.jsonl: a part sink (sinks.RegisterPart) that writes
// jsonl/rollouts-DIR-NNNNN.jsonl beside each part DIR/part-NNNNN.parquet,
// staged, committed and aborted with it, and paired at a resume
// (PairParts).
package jsonl
