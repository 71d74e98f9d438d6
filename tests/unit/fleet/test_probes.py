"""The worker's probes without a worker: what /readyz and /healthz answer, over real HTTP."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client import CollectorRegistry

from rolloutfleet.fleet.probes import Probes, serve


def answer(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def test_not_ready_until_set_then_not_ready_with_the_reason() -> None:
    probes = Probes()
    assert probes.readiness() == (False, "starting")
    probes.set_ready(True)
    assert probes.readiness() == (True, "")
    probes.set_ready(False, "redis: connection refused")
    assert probes.readiness() == (False, "redis: connection refused")


def test_a_stalled_loop_is_neither_live_nor_ready() -> None:
    probes = Probes(stall_seconds=0.0)  # any time since the last beat is a stall
    probes.set_ready(True)
    assert not probes.live
    ready, reason = probes.readiness()
    assert not ready and reason == "sampling loop stalled (no progress for 0 s)"


def test_the_endpoints_answer_what_the_state_says() -> None:
    probes = Probes()
    server = serve(probes, CollectorRegistry(), 0, host="127.0.0.1")
    try:
        port = server.server_port
        assert answer(port, "/readyz") == (503, "not ready: starting\n")
        probes.set_ready(True)
        assert answer(port, "/readyz") == (200, "ok\n")
        assert answer(port, "/healthz") == (200, "ok\n")
        probes.stall_seconds = 0.0
        assert answer(port, "/healthz") == (503, "sampling loop stalled\n")
        assert answer(port, "/readyz") == (503, "not ready: sampling loop stalled (no progress for 0 s)\n")
        assert answer(port, "/nothing")[0] == 404
    finally:
        server.shutdown()


def test_a_worker_failed_for_good_is_unhealthy_and_unready_with_the_line() -> None:
    probes = Probes()
    probes.set_ready(True)
    probes.beat()
    probes.failed = "spec.env.id 'X-v0': sub-env 2 step has not returned after 300 s"
    assert probes.health() == (False, probes.failed) and not probes.live
    assert probes.readiness() == (False, probes.failed)
    server = serve(probes, CollectorRegistry(), 0, host="127.0.0.1")
    try:
        assert answer(server.server_port, "/healthz") == (503, probes.failed + "\n")
    finally:
        server.shutdown()
