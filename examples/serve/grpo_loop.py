"""A GRPO-style training loop against trajflow serve, on the standard library.

Each step: take K groups, "train" on them for a while (here: the group
advantages, and a sleep standing in for the optimizer), then update the
policy as an asynchronous trainer does: pause the fleet, load the new
weights (a sleep), announce the version, resume, and acknowledge the step.

    go run ./cmd/trajflow serve examples/serve/serve.yaml &
    python3 examples/serve/grpo_loop.py --url http://127.0.0.1:8700 --steps 3 --groups 8

It exits 1 when the service breaks a promise it checks: exactly K complete
groups per step, every group kept with non-zero reward spread, no group in
two steps, the steps acknowledged.
"""

import argparse
import collections
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client import ServeClient  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8700")
    ap.add_argument("--token-env", default="", help="the variable holding the bearer token")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--train-seconds", type=float, default=0.2)
    ap.add_argument("--pause-mode", default="abort", choices=["abort", "keep"])
    args = ap.parse_args()

    token = os.environ.get(args.token_env) if args.token_env else None
    # Retries while the service restarts, saying so; the status first: the
    # fleet's policy version is where a restarted trainer goes on from.
    c = ServeClient(args.url, token=token,
                    on_retry=lambda e, wait: print(f"retrying in {wait:.1f}s: {e}", file=sys.stderr, flush=True))
    version = c.status()["policy_version"]
    seen = {}
    for _ in range(args.steps):
        step = c.next(args.groups, format="jsonl")
        by_group = collections.defaultdict(list)
        for row in step.rows:
            by_group[(row["task_index"], row["attempt"])].append(row)
        if len(by_group) != args.groups or step.groups != args.groups:
            fail(f"step {step.number}: {len(by_group)} groups, want {args.groups}")
        loss = 0.0
        for key, rows in by_group.items():
            if key in seen:
                fail(f"group {key} in steps {seen[key]} and {step.number}")
            seen[key] = step.number
            if len(rows) != rows[0]["group_size"]:
                fail(f"step {step.number}: group {key} has {len(rows)} of {rows[0]['group_size']} rows")
            rewards = [r["reward"] for r in rows]
            if not all(r["kept"] for r in rows) or statistics.pstdev(rewards) == 0:
                fail(f"step {step.number}: group {key} not kept with reward spread: {rewards}")
            mean = statistics.mean(rewards)
            loss += sum(abs(x - mean) for x in rewards)
        time.sleep(args.train_seconds)  # the optimizer step

        # The weight update: pause, load, announce, resume.
        c.pause(args.pause_mode)
        time.sleep(args.train_seconds / 4)
        version += 1
        c.set_policy(version)
        c.resume()
        c.ack(step.number)
        print(f"step {step.number}: {len(by_group)} groups, {len(step.rows)} rows, "
              f"versions {step.versions}, |A| {loss:.2f}; policy now v{version}", flush=True)

    st = c.status()
    if st["policy_version"] != version or st["steps"]["acked"] < args.steps or st["paused"]:
        fail(f"status after the loop: {st}")
    print(f"ok: {args.steps} steps, policy v{version}, keep rate {st['keep_rate']:.2f}")


def fail(msg):
    print("grpo_loop: " + msg, file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
    main()
