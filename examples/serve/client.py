"""A client of trajflow serve (docs/serve.md), on Python's standard library.

    from client import ServeClient
    c = ServeClient("http://127.0.0.1:8700", token=os.environ.get("TRAJFLOW_TOKEN"))
    step = c.next(groups=8)           # jsonl: step.rows is a list of dicts
    ...train on step.rows...
    c.ack(step.number)

format="parquet" returns the Parquet bytes in step.body and, when pyarrow is
installed, a pyarrow.Table in step.table. The API in OpenAPI 3 is
docs/serve.openapi.yaml.

A trainer started afresh or from a checkpoint calls c.status() first: its
policy_version is the fleet's (post that or a later one), last_acked_step
the last step trained on. Every call is retried while the service restarts
(connection refused or reset, a 502, 503 or 504 but a 503 whose reason is
"ended"), waiting a random time between w/2 and w, w doubling from
retry_initial to retry_max seconds, for at most retry_deadline seconds
from the call's first failure (None: no retries); every call is safe to
retry.
"""

import http.client
import io
import json
import os
import random
import socket
import struct
import time
import urllib.error
import urllib.parse
import urllib.request

try:  # optional: Parquet bodies as tables
    import pyarrow.parquet as _pq
except ImportError:  # pragma: no cover - depends on the environment
    _pq = None


class ServeError(Exception):
    """An error answer of the service: its HTTP status, message and the
    request parameter it names (None when none is to blame)."""

    def __init__(self, status, message, parameter=None, reason=None, policy_version=None):
        super().__init__(f"{status}: {parameter + ': ' if parameter else ''}{message}")
        self.status = status
        self.message = message
        self.parameter = parameter
        self.reason = reason  # when no parameter is to blame: ended, stopping, internal, ...
        self.policy_version = policy_version  # a 409 of set_policy: the current version

    def retryable(self):
        """A restart of the service (or a proxy before it) answered."""
        return self.status in (502, 504) or (self.status == 503 and self.reason != "ended")


class Step:
    """One training step as served."""

    def __init__(self, number, versions, groups, rows_count, fmt, body, rank=None, world=None, step_groups=None):
        self.number = number  # acknowledge it with ServeClient.ack
        self.versions = versions  # policy versions of its tokens, ascending
        self.groups = groups  # a rank's slice: the slice's groups and rows
        self.rows_count = rows_count
        self.rank = rank  # next(rank=, world=): this slice's rank and world
        self.world = world
        self.step_groups = step_groups if step_groups is not None else groups  # the whole step's groups
        self.format = fmt
        self.body = body  # the raw body
        self.rows = None  # jsonl: one dict per row
        self.table = None  # parquet with pyarrow installed: a pyarrow.Table
        if fmt == "jsonl":
            self.rows = [json.loads(line) for line in body.splitlines() if line.strip()]
        elif fmt == "parquet" and _pq is not None:
            self.table = _pq.read_table(io.BytesIO(body))


# The errors of a connection to a service that is down or restarting (a
# timeout is the caller's bound, not one of them).
_CONNECTION_ERRORS = (ConnectionError, http.client.HTTPException)


class ServeClient:
    """Talks to one trajflow serve. timeout bounds every call but next,
    which waits until the step is ready (next_timeout, None: no bound).
    name names this caller (the Trajflow-Client header, recorded as a
    pause's by; default host:pid; a rank is a good name). on_retry, when
    set, is called with each error retried and the wait before the next
    try."""

    def __init__(self, url, token=None, timeout=30.0, next_timeout=None, name=None,
                 retry_initial=0.2, retry_max=5.0, retry_deadline=300.0, on_retry=None):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.next_timeout = next_timeout
        self.name = name if name is not None else f"{socket.gethostname()}:{os.getpid()}"
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.retry_deadline = retry_deadline
        self.on_retry = on_retry

    def _retry(self, call):
        """Runs call until it succeeds, fails with an error not retried, or
        retry_deadline seconds have passed since its first failure (then the
        last error is raised)."""
        start = None
        wait = self.retry_initial
        while True:
            try:
                return call()
            except ServeError as e:
                if self.retry_deadline is None or not e.retryable():
                    raise
                err = e
            except _CONNECTION_ERRORS as e:
                if self.retry_deadline is None:
                    raise
                err = e
            except urllib.error.URLError as e:  # not an HTTPError: those are ServeErrors
                if (self.retry_deadline is None or not isinstance(e.reason, OSError)
                        or isinstance(e.reason, TimeoutError)):
                    raise
                err = e
            if start is None:
                start = time.monotonic()
            d = random.uniform(wait / 2, wait)
            if time.monotonic() - start + d > self.retry_deadline:
                raise err
            if self.on_retry is not None:
                self.on_retry(err, d)
            time.sleep(d)
            wait = min(2 * wait, self.retry_max)

    def _request(self, method, path, body=None, timeout=None, content_type="application/json"):
        data = None
        headers = {}
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if self.name:
            headers["Trajflow-Client"] = self.name
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            resp = urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)
            except ValueError:
                raise ServeError(e.code, raw.decode(errors="replace").strip()) from None
            raise ServeError(e.code, err.get("error", ""), err.get("parameter"), err.get("reason"),
                             err.get("policy_version")) from None
        with resp:
            return resp.headers, resp.read()

    def next(self, groups, format="jsonl", rank=None, world=None):
        """Takes the next step of `groups` kept groups (format jsonl or
        parquet), waiting until they are ready. The step is leased: ack it
        once trained on, or it is served again when serve.lease runs out.
        A step served again comes whole whatever `groups` asks: step.groups
        says its size.

        With rank and world (a data-parallel job: torchrun's RANK and
        WORLD_SIZE) every rank gets a disjoint slice of the same step of
        `groups` groups, whole groups balanced by tokens (format jsonl);
        each acks its slice with ack(step.number, rank, world), and the
        step is done once every rank has."""
        params = {"groups": groups, "format": format}
        if rank is not None or world is not None:
            params.update(rank=rank, world=world)
        q = urllib.parse.urlencode(params)
        headers, body = self._retry(lambda: self._request("GET", "/v1/steps/next?" + q, timeout=self.next_timeout))
        versions = [int(v) for v in headers.get("Trajflow-Policy-Versions", "").split(",") if v]
        opt = lambda name: int(headers[name]) if headers.get(name) else None  # noqa: E731
        return Step(
            int(headers["Trajflow-Step"]),
            versions,
            int(headers.get("Trajflow-Groups", 0)),
            int(headers.get("Trajflow-Rows", 0)),
            format,
            body,
            opt("Trajflow-Rank"),
            opt("Trajflow-World"),
            opt("Trajflow-Step-Groups"),
        )

    def ack(self, step, rank=None, world=None, logprobs=None):
        """Acknowledges a step (idempotent); with rank and world, that
        rank's slice of it. logprobs, when given, are the trainer's own
        logprobs of the step's generated tokens: one sequence of floats
        per row, in the step's row order, each row's tokens whose
        loss_mask is 1 ([] for a row without token ids); the service
        measures the drift from the engine's and answers it under
        "drift" (docs/serve.md, "Drift")."""
        q = f"?rank={int(rank)}&world={int(world)}" if rank is not None or world is not None else ""
        path = f"/v1/steps/{int(step)}/ack{q}"
        if logprobs is None:
            return self._json("POST", path)
        # The raw body: every row's values as little-endian float32, one
        # row after the other; the service splits them by its rows.
        body = b"".join(struct.pack(f"<{len(row)}f", *row) for row in logprobs)
        return self._json("POST", path, body, content_type="application/octet-stream")

    def set_policy(self, version):
        """Weights of this version are live on the fleet."""
        return self._json("POST", "/v1/policy", {"version": int(version)})

    def pause(self, mode=None):
        """Stops new generation until resume; mode abort or keep (None:
        serve.pause_mode). The service records it with its time and
        self.name (status(): paused_since, paused_by)."""
        return self._json("POST", "/v1/pause", {"mode": mode} if mode else None)

    def resume(self):
        return self._json("POST", "/v1/resume")

    def status(self):
        """The service's status: call it first (policy_version,
        last_acked_step, paused, paused_by, ...)."""
        return self._json("GET", "/v1/status")

    def _json(self, method, path, body=None, content_type="application/json"):
        _, raw = self._retry(lambda: self._request(method, path, body, timeout=self.timeout,
                                                   content_type=content_type))
        return json.loads(raw) if raw else None
