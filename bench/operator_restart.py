"""SIGKILL of a worker -> its replacement's first published batch, with real worker
processes (the test kubelet runs them; backoff 0), next to the worker's cold start (pod
created -> first batch): the target is "<= 5 s beyond process start-up". Part of
``python -m bench.bench_operator --restart``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench import children
from bench.bench_operator import API, job, operator_args, operator_env
from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.transport.consumer import BatchConsumer
from tests.cluster.kubelet import LocalKubelet


def _wait(condition: Any, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
    raise TimeoutError("condition not met")


def measure_restart(kubeconfig: str, core: Any, custom: Any, redis_url: str, work: Path) -> list[str]:
    """Lines for the report: the cold start, and the median of 3 kills."""
    core.create_namespace({"metadata": {"name": "kill"}})
    env = {**operator_env(kubeconfig), "ROLLOUTFLEET_WORKER_METRICS_PORT": str(free_port() // 10 * 10)}
    operator = children.spawn(
        operator_args(kubeconfig, "kill", free_port(), None, work), work / "operator-kill.log", env
    )
    try:
        with LocalKubelet(kubeconfig, work_dir=work / "kubelet") as kubelet:
            consumer = BatchConsumer(redis_url, "victim", namespace="kill", group="bench")
            created = time.monotonic()
            custom.create_namespaced_custom_object(*API, "kill", "rolloutjobs", job("victim", 1, redis_url))
            producers: set[str] = set()

            def published(new_only: bool) -> bool:
                for message in consumer.read(timeout=0.05):
                    message.ack()
                    if not new_only or message.metadata.producer not in producers:
                        producers.add(message.metadata.producer)
                        return True
                return False

            cold = _wait(lambda: published(False), 120) - created
            kills = []
            for _ in range(3):  # the worker that published last is the live one (a new producer each start)
                killed = time.monotonic()
                kubelet.kill("kill", "victim-worker-0")
                kills.append(_wait(lambda: published(True), 120) - killed)
    finally:
        children.stop(operator)
    kills.sort()
    return [
        f"pod created -> first batch (cold worker start): {cold:.2f} s",
        f"SIGKILL -> replacement's first batch (median of 3): {kills[1]:.2f} s "
        f"({kills[1] - cold:+.2f} s beyond start-up; target <= 5 s)",
    ]
