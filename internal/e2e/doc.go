// Package e2e holds end-to-end tests of the trajflow binary: they build
// cmd/trajflow once, run it as a real child process on generated task files
// with the built-in simulator, and read what it committed back with Arrow's
// own Parquet reader.
//
// TestCrashResume kills runs with SIGKILL at 20 random points (after a
// commit, or at a random moment, resume scan included), resumes each
// time, and checks that the final data equals an uninterrupted run's, row
// for row: no key lost, none duplicated, every committed file readable,
// temporary files never taken for data. TestResumeConfigChange checks that
// a resume under a config whose semantic keys changed is refused, naming
// the keys, unless --allow-config-change is given. TestInterruptResume
// interrupts a run with SIGINT: it exits 130 keeping whole committed files,
// and a resume completes the data. TestSIGTERMCommitsFinishedGroups sends
// SIGTERM under the default settings (no file committed yet): the finished
// groups are committed, metrics.json written, and the rerun completes the
// data exactly once. TestUnauthorizedServerFailsFast runs against a
// `trajflow sim-server --fail 401=1` process: exit 4 within seconds, and
// after the fix the rerun commits every rollout ok. TestFaultyServerProcess
// runs against a sim-server injecting faults into 30% of requests.
// docs/reliability.md lists each promise and its test.
//
// Run them with
//
//	go test ./internal/e2e/
//
// The crash and interrupt tests are skipped under -short.
package e2e
