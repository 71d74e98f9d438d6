"""The operator on the local control plane (hack/cluster): real API server, etcd, GC.

* SIGKILL of a worker -> its replacement's first published batch (real worker processes
  run by the test kubelet; backoff 0), next to the worker's cold start (pod created ->
  first batch), since the target is "<= 5 s beyond process start-up";
* ``kubectl apply`` -> all pods Running and the job Ready, for 10, 100 and 1 000 workers
  (the test kubelet in simulate mode: pods are bound and reported Running without
  processes, so the figure is the operator's and the API server's), with pods created/s
  and the operator's peak RSS.

Usage: ``python -m bench.bench_operator [--sizes 10 100 1000]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client, config

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis, free_port
from rolloutfleet.transport.consumer import BatchConsumer
from tests.cluster.kubelet import LocalKubelet

REPO = Path(__file__).resolve().parents[1]

API = ("rolloutfleet.io", "v1alpha1")


def job(name: str, replicas: int, redis_url: str) -> dict[str, object]:
    return {
        "apiVersion": "rolloutfleet.io/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "env": {"id": "CartPole-v1", "numEnvs": 2},
            "sampling": {"rolloutFragmentLength": 50},
            "redis": {"url": redis_url, "maxLen": 100, "backpressure": "dropOldest"},
            "restartPolicy": {"backoffSeconds": 0},
        },
    }


def start_operator(kubeconfig: str, namespace: str, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "KUBECONFIG": kubeconfig,
        "ROLLOUTFLEET_WORKER_COMMAND": json.dumps([sys.executable, "-m", "rolloutfleet.cli.main", "worker"]),
        "ROLLOUTFLEET_WORKER_METRICS_PORT": str(free_port() // 10 * 10),
        "ROLLOUTFLEET_WORKER_PORT_PER_INDEX": "1",
        "ROLLOUTFLEET_READ_PROGRESS": "0",
    }
    args = [sys.executable, "-m", "rolloutfleet_operator", "--namespace", namespace, "--standalone"]
    args += ["--liveness-port", str(free_port()), "--metrics-port", "0", "--log-level", "warning"]
    with log.open("wb") as out:
        return subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):  # peak resident set size
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait(condition, timeout: float, interval: float = 0.05) -> float:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        time.sleep(interval)
    raise TimeoutError("condition not met")


def measure_scale(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, size: int, started: float
) -> tuple[float, float, float]:
    """Seconds from ``started`` until all pods exist, all are Running, the job is Ready."""

    def count(phase: str | None = None) -> int:
        pods = core.list_namespaced_pod(namespace, label_selector="rolloutfleet.io/job=big").items
        return sum(1 for p in pods if phase is None or p.status.phase == phase)

    def ready() -> bool:
        status = custom.get_namespaced_custom_object(*API, namespace, "rolloutjobs", "big").get("status") or {}
        return bool(status.get("readyReplicas") == size and status.get("phase") == "Running")

    all_created = wait(lambda: count() >= size, 600, interval=0.2)
    all_running = wait(lambda: count("Running") >= size, 600, interval=0.2)
    all_ready = wait(ready, 600, interval=0.2)
    return all_created - started, all_running - started, all_ready - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-operator-"))
    state = work / "cluster"
    subprocess.run([str(REPO / "hack/cluster/up.sh"), str(state)], check=True, capture_output=True)
    kubeconfig = str(state / "kubeconfig")
    kubectl = str(
        Path(
            subprocess.run(
                [str(REPO / "hack/cluster/get-tools.sh")], capture_output=True, text=True, check=True
            ).stdout.split()[-1]
        )
        / "kubectl"
    )
    subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, "apply", "--server-side", "-f", str(REPO / "crds")],
        check=True,
        capture_output=True,
    )
    api = config.new_client_from_config(config_file=kubeconfig)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    redis = EmbeddedRedis().start()
    rows: list[tuple[str, str]] = []
    try:
        # 1. SIGKILL -> replacement's first batch, with real worker processes.
        core.create_namespace({"metadata": {"name": "kill"}})
        operator = start_operator(kubeconfig, "kill", work / "operator-kill.log")
        with LocalKubelet(kubeconfig, work_dir=work / "kubelet") as kubelet:
            consumer = BatchConsumer(redis.url, "victim", namespace="kill", group="bench")
            created = time.monotonic()
            custom.create_namespaced_custom_object(*API, "kill", "rolloutjobs", job("victim", 1, redis.url))
            producers: set[str] = set()

            def published(new_only: bool) -> bool:
                for message in consumer.read(timeout=0.05):
                    message.ack()
                    if not new_only or message.metadata.producer not in producers:
                        producers.add(message.metadata.producer)
                        return True
                return False

            first = wait(lambda: published(False), 120, interval=0)
            cold = first - created
            kills = []
            for _ in range(3):
                # The worker that published last is the live one (a new producer each start).
                killed = time.monotonic()
                kubelet.kill("kill", "victim-worker-0")
                kills.append(wait(lambda: published(True), 120, interval=0) - killed)
            operator.terminate()
            operator.wait(20)
        kills.sort()
        rows.append(("pod created -> first batch (cold worker start)", f"{cold:.2f} s"))
        rows.append(
            (
                "SIGKILL -> replacement's first batch (median of 3)",
                f"{kills[1]:.2f} s ({kills[1] - cold:+.2f} s beyond start-up; target <= 5 s)",
            )
        )

        # 2. Scale: apply -> all Running and Ready, simulated pods.
        with LocalKubelet(kubeconfig, node_name="sim-node", simulate=True, work_dir=work / "sim", max_pods=5000) as _:
            for size in args.sizes:
                namespace = f"scale-{size}"
                core.create_namespace({"metadata": {"name": namespace}})
                operator = start_operator(kubeconfig, namespace, work / f"operator-{size}.log")
                time.sleep(3)  # the operator is up and watching
                started, cpu_before = time.monotonic(), cpu_s(operator.pid)
                custom.create_namespaced_custom_object(*API, namespace, "rolloutjobs", job("big", size, redis.url))

                times = measure_scale(core, custom, namespace, size, started)
                cpu = cpu_s(operator.pid) - cpu_before
                rows.append(
                    (
                        f"{size} workers: apply -> all Running / job Ready",
                        f"{times[1]:.1f} s / {times[2]:.1f} s; "
                        f"{size / times[0]:.0f} pods created/s; operator CPU {cpu:.1f} s, "
                        f"peak RSS {rss_mb(operator.pid):.0f} MB",
                    )
                )
                operator.terminate()
                operator.wait(30)
    finally:
        redis.stop()
        subprocess.run([str(REPO / "hack/cluster/down.sh"), str(state)], capture_output=True, check=False)
    print(f"\nOperator on the local control plane (kube-apiserver v1.35.8, etcd v3.6.5, {os.cpu_count()} cores)")
    for name, value in rows:
        print(f"  {name:<52} {value}")


if __name__ == "__main__":
    main()
