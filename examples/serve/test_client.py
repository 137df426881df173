"""Unit tests of client.py's retries, on the standard library alone.

    python3 -m unittest -v test_client      # from examples/serve

A scripted HTTP server (http.server in a thread) answers each request
with the next answer of a script: a status and JSON body, a body that
is not the service's (a proxy's 502), or a connection cut before any
answer. examples/serve/client_test.go runs these from `go test`.
"""

import http.server
import json
import socket
import threading
import time
import unittest

from client import ServeClient, ServeError


class _Handler(http.server.BaseHTTPRequestHandler):
    def _answer(self):
        srv = self.server
        with srv.lock:
            srv.requests.append((self.command, self.path, dict(self.headers)))
            answer = srv.script.pop(0) if srv.script else srv.default
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            body = self.rfile.read(n)
            with srv.lock:
                srv.bodies.append(body)
        if answer == "cut":
            # The service died mid-request: the connection closes with no
            # answer at all.
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        status, body, headers = answer
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def _start(script, default=(200, {"status": "ok"}, None), port=0):
    srv = _Server(("127.0.0.1", port), _Handler)
    srv.script, srv.default, srv.requests, srv.lock = list(script), default, [], threading.Lock()
    srv.bodies = []
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return srv


def _stopping():
    return (503, {"error": "the service is stopping", "reason": "stopping"}, None)


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class RetryTest(unittest.TestCase):
    def client(self, url, **kw):
        self.retried = []
        opts = dict(retry_initial=0.01, retry_max=0.04, retry_deadline=5.0, timeout=5.0,
                    on_retry=lambda err, d: self.retried.append((err, d)))
        opts.update(kw)
        return ServeClient(url, **opts)

    def serve(self, script, **kw):
        srv = _start(script, **kw)
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        return srv, f"http://127.0.0.1:{srv.server_address[1]}"

    def test_retried_answers(self):
        """A 503 but ended, a proxy's 502 or 504 without a JSON body, and a
        connection cut before any answer are retried, and the call then
        succeeds."""
        cases = {
            "503 stopping": _stopping(),
            "502 of a proxy": (502, b"<html>Bad Gateway</html>", {"Content-Type": "text/html"}),
            "504 of a proxy": (504, b"Gateway Timeout", None),
            "connection cut": "cut",
        }
        for name, answer in cases.items():
            with self.subTest(name):
                srv, url = self.serve([answer, answer])
                got = self.client(url).status()
                self.assertEqual(got, {"status": "ok"})
                self.assertEqual(len(self.retried), 2)
                self.assertEqual(len(srv.requests), 3)

    def test_ack_logprobs(self):
        """An ack with logprobs sends them as the service reads them: the
        raw body (application/octet-stream), every row's values as
        little-endian float32, one row after the other (an empty row adds
        nothing); it is retried like any call."""
        import struct
        srv, url = self.serve([(503, {"error": "busy"}, {"Retry-After": "0"}),
                               (200, {"step": 3, "acked": True, "drift": {"step": 3}}, None)])
        got = self.client(url).ack(3, logprobs=[[-0.5, -1.25], [], [-3.0]])
        self.assertEqual(got["drift"], {"step": 3})
        self.assertEqual(len(srv.requests), 2)
        for method, path, headers in srv.requests:
            self.assertEqual((method, path), ("POST", "/v1/steps/3/ack"))
            self.assertEqual(headers["Content-Type"], "application/octet-stream")
        for body in srv.bodies:
            self.assertEqual(len(body), 12)
            self.assertEqual(list(struct.unpack("<3f", body)), [-0.5, -1.25, -3.0])

    def test_not_retried(self):
        """A 503 whose reason is ended, a 409, a 400 and a 500 are raised at
        once, with what the body says."""
        cases = {
            "503 ended": ((503, {"error": "the input ran out", "reason": "ended"}, None), 503, None, "ended"),
            "409 version": ((409, {"error": "below", "parameter": "version", "policy_version": 5}, None), 409, "version", None),
            "400 groups": ((400, {"error": "bad", "parameter": "groups"}, None), 400, "groups", None),
            "500 internal": ((500, {"error": "disk", "reason": "internal"}, None), 500, None, "internal"),
        }
        for name, (answer, status, parameter, reason) in cases.items():
            with self.subTest(name):
                srv, url = self.serve([answer])
                with self.assertRaises(ServeError) as cm:
                    self.client(url).set_policy(3)
                e = cm.exception
                self.assertEqual((e.status, e.parameter, e.reason), (status, parameter, reason))
                if status == 409:
                    self.assertEqual(e.policy_version, 5)
                self.assertEqual(self.retried, [])
                self.assertEqual(len(srv.requests), 1)

    def test_connection_refused_until_the_service_is_back(self):
        """Nothing listens (the service restarts): the call retries the
        refused connections and succeeds once it listens again."""
        port = _free_port()
        c = self.client(f"http://127.0.0.1:{port}", retry_max=0.05)
        holder = {}

        def come_back():
            time.sleep(0.3)
            holder["srv"] = _start([], port=port)

        t = threading.Thread(target=come_back)
        t.start()
        try:
            self.assertEqual(c.status(), {"status": "ok"})
        finally:
            t.join()
            if "srv" in holder:
                holder["srv"].shutdown()
                holder["srv"].server_close()
        self.assertGreater(len(self.retried), 0)
        self.assertTrue(all(isinstance(err, OSError) or isinstance(getattr(err, "reason", None), OSError)
                            for err, _ in self.retried), self.retried)

    def test_backoff(self):
        """Each wait is between w/2 and w, w doubling from retry_initial to
        retry_max."""
        srv, url = self.serve([_stopping()] * 6)
        self.client(url, retry_initial=0.01, retry_max=0.04).status()
        waits = [d for _, d in self.retried]
        self.assertEqual(len(waits), 6)
        for d, w in zip(waits, [0.01, 0.02, 0.04, 0.04, 0.04, 0.04]):
            self.assertGreaterEqual(d, w / 2)
            self.assertLessEqual(d, w)

    def test_deadline(self):
        """Past retry_deadline from the first failure the last error is
        raised; with retry_deadline None nothing is retried."""
        srv, url = self.serve([], default=_stopping())
        with self.assertRaises(ServeError) as cm:
            self.client(url, retry_deadline=0.2).status()
        self.assertEqual((cm.exception.status, cm.exception.reason), (503, "stopping"))
        self.assertGreater(len(self.retried), 1)
        self.assertLessEqual(sum(d for _, d in self.retried), 0.2)
        n = len(srv.requests)
        with self.assertRaises(ServeError):
            self.client(url, retry_deadline=None).status()
        self.assertEqual(self.retried, [])
        self.assertEqual(len(srv.requests), n + 1)

    def test_next_after_a_restart(self):
        """next() is retried like every call: the step answered after the
        503s carries its headers; every request names the client."""
        headers = {"Trajflow-Step": "7", "Trajflow-Policy-Versions": "2,3", "Trajflow-Groups": "2",
                   "Trajflow-Rows": "2"}
        body = b'{"task_index": 0}\n{"task_index": 1}\n'
        srv, url = self.serve([_stopping(), "cut", (200, body, headers)])
        step = self.client(url, name="rank-0").next(2)
        self.assertEqual((step.number, step.versions, step.groups, step.rows_count), (7, [2, 3], 2, 2))
        self.assertEqual([r["task_index"] for r in step.rows], [0, 1])
        self.assertEqual(len(self.retried), 2)
        self.assertTrue(all(h.get("Trajflow-Client") == "rank-0" for _, _, h in srv.requests))
        self.assertTrue(all(p.startswith("/v1/steps/next?") for _, p, _ in srv.requests))


if __name__ == "__main__":
    unittest.main()
