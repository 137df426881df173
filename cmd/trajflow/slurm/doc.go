// Package slurm writes the Slurm batch scripts of a sharded trajflow run
// (an array job whose tasks are the shards, and a merge job that depends
// on it), submits them with sbatch, and reads sbatch's --parsable answer.
//
// The array script runs `trajflow run CONFIG --set source.shard=auto`, so
// each task takes its shard from SLURM_ARRAY_TASK_ID and
// SLURM_ARRAY_TASK_COUNT. It is written for preemption and requeue: Slurm
// signals the whole job with SIGTERM before it kills it (requeue,
// preemption, scancel), trajflow commits what is finished and exits, and a
// requeued task runs the same command again, which resumes from the
// shard's committed files. A SIGUSR1 to the batch shell (sbatch's
// --signal=B:USR1@T before the time limit, or `scancel -b -s USR1`) stops
// trajflow gracefully and requeues the task.
package slurm
