// Package serve is trajflow serve: a continuous run of the pipeline that
// hands out training steps over HTTP to asynchronous RL trainers
// (docs/serve.md).
//
// Run drives runner.Run with a demand (groups.Supply) that the trainers'
// requests raise, a policy (generate.Policy) the API versions and pauses,
// and a hook that hears each committed data file. A loader reads those
// files, in order and off the run's commit path, into the queue of kept
// groups. A request for K groups takes K queued groups (oldest policy
// version first; under serve.max_staleness, those too stale to serve are
// set aside), records them as a step in served/state.json, and only then
// answers, from their records, while the step's folder under
// OUTPUT/served/ (schema.ServedDir) is written beside with the Parquet
// sink's writer (a restart writes a recorded step's missing folder from
// data/).
//
// The state machine is the ledger (ledger.go): the steps and their
// leases, the queue, the waiting trainers, the policy version and the
// pause. It decides under its lock, persists outside it and publishes
// under it: a change the state file records is written (through
// internal/durable) with the lock released and becomes visible only once
// recorded, so that no status or Prometheus scrape waits on the disk and
// nothing is answered that a restart would not find. Reads never change
// state; leases end in one place (an ack, or expire on the service's
// tick). Its clock is a function, so its tests move time themselves. Its
// errors are sentinels that the HTTP layer matches with errors.Is to
// choose a status (errorAnswers), and the API's routes, with the 405s of
// their other methods, come from one table (routeTable).
//
// A step asked for by the ranks of a data-parallel job (rank, world) is
// one step cut into slices (slice.go: whole groups, balanced by tokens,
// the same cut every time); a lease holds a slot, a whole step or one
// rank's slice, and the step is acknowledged once every slice is.
//
// The HTTP handlers are in http.go; the Go client and the API's wire
// types are in package serve/client.
package serve
