"""A client of trajflow serve (docs/serve.md), on Python's standard library.

    from client import ServeClient
    c = ServeClient("http://127.0.0.1:8700", token=os.environ.get("TRAJFLOW_TOKEN"))
    step = c.next(groups=8)           # jsonl: step.rows is a list of dicts
    ...train on step.rows...
    c.ack(step.number)

format="parquet" returns the Parquet bytes in step.body and, when pyarrow is
installed, a pyarrow.Table in step.table. The API in OpenAPI 3 is
docs/serve.openapi.yaml.
"""

import io
import json
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

    def __init__(self, status, message, parameter=None):
        super().__init__(f"{status}: {parameter + ': ' if parameter else ''}{message}")
        self.status = status
        self.message = message
        self.parameter = parameter


class Step:
    """One training step as served."""

    def __init__(self, number, versions, groups, rows_count, fmt, body):
        self.number = number  # acknowledge it with ServeClient.ack
        self.versions = versions  # policy versions of its tokens, ascending
        self.groups = groups
        self.rows_count = rows_count
        self.format = fmt
        self.body = body  # the raw body
        self.rows = None  # jsonl: one dict per row
        self.table = None  # parquet with pyarrow installed: a pyarrow.Table
        if fmt == "jsonl":
            self.rows = [json.loads(line) for line in body.splitlines() if line.strip()]
        elif fmt == "parquet" and _pq is not None:
            self.table = _pq.read_table(io.BytesIO(body))


class ServeClient:
    """Talks to one trajflow serve. timeout bounds every call but next,
    which waits until the step is ready (next_timeout, None: no bound)."""

    def __init__(self, url, token=None, timeout=30.0, next_timeout=None):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.next_timeout = next_timeout

    def _request(self, method, path, body=None, timeout=None):
        data = None
        headers = {}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            resp = urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)
                raise ServeError(e.code, err.get("error", ""), err.get("parameter")) from None
            except ValueError:
                raise ServeError(e.code, raw.decode(errors="replace").strip()) from None
        with resp:
            return resp.headers, resp.read()

    def next(self, groups, format="jsonl"):
        """Takes the next step of `groups` kept groups (format jsonl or
        parquet), waiting until they are ready. The step is leased: ack it
        once trained on, or it is served again when serve.lease runs out."""
        q = urllib.parse.urlencode({"groups": groups, "format": format})
        headers, body = self._request("GET", "/v1/steps/next?" + q, timeout=self.next_timeout)
        versions = [int(v) for v in headers.get("Trajflow-Policy-Versions", "").split(",") if v]
        return Step(
            int(headers["Trajflow-Step"]),
            versions,
            int(headers.get("Trajflow-Groups", 0)),
            int(headers.get("Trajflow-Rows", 0)),
            format,
            body,
        )

    def ack(self, step):
        """Acknowledges a step (idempotent)."""
        return self._json("POST", f"/v1/steps/{int(step)}/ack")

    def set_policy(self, version):
        """Weights of this version are live on the fleet."""
        return self._json("POST", "/v1/policy", {"version": int(version)})

    def pause(self, mode=None):
        """Stops new generation until resume; mode abort or keep (None:
        serve.pause_mode)."""
        return self._json("POST", "/v1/pause", {"mode": mode} if mode else None)

    def resume(self):
        return self._json("POST", "/v1/resume")

    def status(self):
        return self._json("GET", "/v1/status")

    def _json(self, method, path, body=None):
        _, raw = self._request(method, path, body, timeout=self.timeout)
        return json.loads(raw) if raw else None
