"""One rank of a data-parallel trainer against trajflow serve, torchrun-style.

Every rank asks for the same step with its rank and the world size and
gets a disjoint slice of it (whole groups, balanced by tokens); each acks
its slice, and the step is done once every rank has. Rank 0 alone brings
the fleet to the new weights (pause, version, resume) after the step.

    torchrun --nproc-per-node 4 examples/serve/ddp_loop.py --url http://127.0.0.1:8700
    # or, without torch: RANK=0 WORLD_SIZE=2 python3 examples/serve/ddp_loop.py & RANK=1 ...

It exits 1 when the service breaks a promise it checks: every slice holds
whole groups, all of the same step, the steps acknowledged.
"""

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client import ServeClient  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8700")
    ap.add_argument("--token-env", default="", help="the variable holding the bearer token")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--groups", type=int, default=8, help="groups per step, over all ranks")
    ap.add_argument("--train-seconds", type=float, default=0.1)
    args = ap.parse_args()

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    token = os.environ.get(args.token_env) if args.token_env else None
    c = ServeClient(args.url, token=token, name=f"rank-{rank}")
    version = c.status()["policy_version"]  # the first call: where the fleet is
    for _ in range(args.steps):
        step = c.next(args.groups, format="jsonl", rank=rank, world=world)
        by_group = collections.Counter((r["task_index"], r["attempt"]) for r in step.rows)
        if step.rank != rank or step.world != world or step.step_groups != args.groups or len(by_group) != step.groups:
            fail(f"rank {rank}: step {step.number}: slice {step.rank}/{step.world} of {step.step_groups} groups, {len(by_group)} in the body")
        for key, n in by_group.items():
            size = next(r["group_size"] for r in step.rows if (r["task_index"], r["attempt"]) == key)
            if n != size:
                fail(f"rank {rank}: step {step.number}: group {key} split ({n} of {size} rows)")
        time.sleep(args.train_seconds)  # forward, backward, all-reduce
        if rank == 0:  # the weight update, once for the job
            c.pause()
            version += 1
            c.set_policy(version)
            c.resume()
        c.ack(step.number, rank, world)
        print(f"rank {rank}: step {step.number}: {step.groups} of {step.step_groups} groups, "
              f"{len(step.rows)} rows", flush=True)
    print(f"rank {rank}: ok: {args.steps} steps")


def fail(msg):
    print("ddp_loop: " + msg, file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
    main()
