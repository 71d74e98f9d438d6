"""The worker's HTTP endpoints: Prometheus ``/metrics``, ``/healthz`` (live), ``/readyz`` (ready).

Live means the sampling loop made progress recently (a stuck env or a deadlock turns it
false, so the kubelet restarts the pod). Ready means the worker can sample and publish when
there is room: env and policy built, Redis reached, the loop live. A full stream that no
learner reads (waiting for a learner) is ready: drains, PodDisruptionBudgets and rollouts go
by readiness, and a healthy fleet waiting for its learner must not look like a dead one.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class Probes:
    """Health state shared between the sampling loop and the HTTP thread."""

    def __init__(self, stall_seconds: float = 300.0) -> None:
        self.ready = False
        self.reason = "starting"
        self.stall_seconds = stall_seconds
        self._beat = time.monotonic()
        self.failed: str | None = None
        """Why the worker is unhealthy for good (an env call that never returned), else None."""

    def beat(self) -> None:
        """The loop is alive (call at least every ``stall_seconds``)."""
        self._beat = time.monotonic()

    def set_ready(self, ready: bool, reason: str = "") -> None:
        self.ready, self.reason = ready, reason

    @property
    def live(self) -> bool:
        return self.failed is None and time.monotonic() - self._beat < self.stall_seconds

    def health(self) -> tuple[bool, str]:
        """(live, why not), as ``/healthz`` answers."""
        if self.failed is not None:
            return False, self.failed
        return self.live, "sampling loop stalled"

    def readiness(self) -> tuple[bool, str]:
        """(ready, why not): a stalled loop is not ready, whatever was set last."""
        if self.failed is not None:
            return False, self.failed
        if not self.live:
            return False, f"sampling loop stalled (no progress for {self.stall_seconds:g} s)"
        return self.ready, self.reason


def serve(probes: Probes, registry: CollectorRegistry, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Start the endpoints on a daemon thread; ``port=0`` picks a free one (see ``server_port``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/metrics"):
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif self.path.startswith("/healthz"):
                ok, why = probes.health()
                self._send(200 if ok else 503, b"ok\n" if ok else f"{why}\n".encode())
            elif self.path.startswith("/readyz"):
                ok, reason = probes.readiness()
                self._send(200 if ok else 503, b"ok\n" if ok else f"not ready: {reason}\n".encode())
            else:
                self._send(404, b"not found\n")

        def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="probes", daemon=True).start()
    return server
