"""The operator on the local control plane (hack/cluster): what it costs per pod, by job size.

Per size (1 000 and 3 000 workers; ``--big`` adds 10 000): a fresh operator process, one
RolloutJob of that size, and :mod:`bench.sim_kubelet` (one watch, one status patch per
pod, no processes). Reported: apply -> all pods created / Running / job Ready, pods
created/s, the operator's CPU seconds (per pod) and peak RSS, the API server's requests
(its own ``apiserver_request_total``) and their rate, and the CPU of the bench process
itself and of kube-apiserver + etcd as a share of the machine. ``--behave`` then takes the
largest job through scale to 100 and back, a spec change (rolled a quarter at a time)
and its deletion. A size that fails is a row saying why; every process the bench
started is stopped whatever happens (:mod:`bench.children`). ``--restart`` adds the
SIGKILL -> replacement's first batch measurement with real workers
(:mod:`bench.operator_restart`).

Usage: ``python -m bench.bench_operator [--sizes 1000 3000] [--big] [--behave] [--restart]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config

from bench import apiserver_metrics, children, create_ceiling, operator_results, results
from bench.operator_table import Row, render
from bench.sim_kubelet import SimKubelet
from rolloutfleet.fleet.embedded_redis import EmbeddedRedis, free_port
from rolloutfleet_operator.loop.api_calls import API_CONCURRENCY

REPO = Path(__file__).resolve().parents[1]
API = ("rolloutfleet.io", "v1alpha1")
BIG = 10_000


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


def operator_args(kubeconfig: str, namespace: str, liveness: int, py_spy: str | None, profile: Path) -> list[str]:
    args = [sys.executable, "-m", "rolloutfleet_operator", "--namespace", namespace, "--standalone"]
    args += ["--liveness-port", str(liveness), "--metrics-port", "0", "--log-level", "warning"]
    if py_spy:  # sampled from outside: threads included, the operator's own code unchanged
        return [py_spy, "record", "--nonblocking", "-f", "raw", "-r", "50", "-o", str(profile), "--", *args]
    return args


def operator_env(kubeconfig: str) -> dict[str, str]:
    return {
        **os.environ,
        "KUBECONFIG": kubeconfig,
        "ROLLOUTFLEET_WORKER_COMMAND": json.dumps([sys.executable, "-m", "rolloutfleet.cli.main", "worker"]),
        "ROLLOUTFLEET_WORKER_PORT_PER_INDEX": "1",
    }


def proc_stat(pid: int) -> tuple[float, float]:
    """(user + system CPU seconds so far, peak RSS in MB) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(
        int(line.split()[1]) / 1024
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmHWM:")
    )
    return cpu, rss


def python_pid(process_pid: int) -> int:
    """The operator's pid: the process itself, or py-spy's child when py-spy runs it."""
    children_file = Path(f"/proc/{process_pid}/task/{process_pid}/children")
    kids = children_file.read_text().split() if children_file.exists() else []
    return int(kids[0]) if kids else process_pid


class Bench:
    """The control plane, the clients, and the measurements of one run."""

    def __init__(self, work: Path, py_spy: str | None) -> None:
        self.work, self.py_spy = work, py_spy
        self.state = work / "cluster"
        subprocess.run([str(REPO / "hack/cluster/up.sh"), str(self.state)], check=True, capture_output=True)
        self.kubeconfig = str(self.state / "kubeconfig")
        self.api = config.new_client_from_config(config_file=self.kubeconfig)
        self.core, self.custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)
        tools = subprocess.run([str(REPO / "hack/cluster/get-tools.sh")], capture_output=True, text=True, check=True)
        kubectl = str(Path(tools.stdout.split()[-1]) / "kubectl")
        crds = [kubectl, "--kubeconfig", self.kubeconfig, "apply", "--server-side", "-f", str(REPO / "crds")]
        subprocess.run(crds, check=True, capture_output=True)
        self.control_plane = [
            int(line.split()[1])
            for line in (self.state / "pids").read_text().splitlines()
            if line.split()[0] in ("kube-apiserver", "etcd")
        ]

    def control_plane_cpu(self) -> float:
        return sum(proc_stat(pid)[0] for pid in self.control_plane)

    def job_status(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The job's raw object (one small GET; the bench polls nothing bigger)."""
        try:
            response = self.custom.get_namespaced_custom_object(
                *API, namespace, "rolloutjobs", name, _preload_content=False
            )
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(json.loads(response.data))

    def wait_job(
        self, namespace: str, name: str, test: Callable[[dict[str, Any] | None], bool], timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        while not test(self.job_status(namespace, name)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {namespace}/{name}: {self.job_status(namespace, name)!r:.300}")
            time.sleep(0.5)

    def start_operator(self, namespace: str, label: str) -> tuple[Any, int]:
        liveness = free_port()
        profile = self.work / f"profile-{label}.txt"
        process = children.spawn(
            operator_args(self.kubeconfig, namespace, liveness, self.py_spy, profile),
            self.work / f"operator-{label}.log",
            env=operator_env(self.kubeconfig),
        )
        deadline = time.monotonic() + 60
        while True:  # kopf's /healthz answers once the operator has started and watches
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{liveness}/healthz", timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the operator did not start (see {self.work}/operator-{label}.log)") from None
                time.sleep(0.2)
        return process, python_pid(process.pid)


def ready(size: int, generation: int | None = None) -> Callable[[dict[str, Any] | None], bool]:
    def test(body: dict[str, Any] | None) -> bool:
        status = (body or {}).get("status") or {}
        gen = generation if generation is not None else (body or {}).get("metadata", {}).get("generation")
        return (
            status.get("phase") == "Running"
            and status.get("readyReplicas") == size
            and status.get("desiredReplicas") == size
            and status.get("replicas") == size
            and status.get("observedGeneration") == gen
        )

    return test


class Meter:
    """CPU, RSS and API requests between :meth:`start` and :meth:`stop`, into a :class:`Row`."""

    def __init__(self, bench: Bench, operator_pid: int | None, row: Row) -> None:
        self.bench, self.pid, self.row = bench, operator_pid, row

    def start(self) -> Meter:
        self.t0, self.op0 = time.monotonic(), proc_stat(self.pid)[0] if self.pid else float("nan")
        self.me0, self.cp0 = time.process_time(), self.bench.control_plane_cpu()
        self.req0 = apiserver_metrics.scrape(self.bench.api)
        return self

    def mark(self, name: str) -> None:
        self.row.seconds[name] = time.monotonic() - self.t0

    def stop(self) -> Row:
        op, rss = proc_stat(self.pid) if self.pid else (float("nan"), float("nan"))
        self.row.operator_cpu_s, self.row.operator_rss_mb = op - self.op0, rss
        self.row.bench_cpu_s = time.process_time() - self.me0
        self.row.control_plane_cpu_s = self.bench.control_plane_cpu() - self.cp0
        self.row.server = apiserver_metrics.diff(apiserver_metrics.scrape(self.bench.api), self.req0)
        self.row.seconds.setdefault("wall", time.monotonic() - self.t0)
        return self.row


def run_size(
    bench: Bench,
    size: int,
    redis_url: str,
    timeout: float,
    behave: bool,
    kubelet: Callable[..., Any] = SimKubelet,
    rows: list[Row] | None = None,
) -> list[Row]:
    """apply -> Ready for one size (then, with ``behave``, the big-job phases): rows appended
    to ``rows`` as they start (a run cut short keeps those done); never raises."""
    namespace, row = f"scale-{size}", Row(f"{size} workers: apply -> Ready", pods=size)
    rows = [] if rows is None else rows
    rows.append(row)
    operator = None
    try:
        bench.core.create_namespace({"metadata": {"name": namespace}})
        operator, pid = bench.start_operator(namespace, str(size))
        with kubelet(bench.api, namespace) as sim:
            meter = Meter(bench, pid, row).start()
            bench.custom.create_namespaced_custom_object(*API, namespace, "rolloutjobs", job("big", size, redis_url))
            for name, test in (("created", lambda: sim.count() >= size), ("running", lambda: sim.running >= size)):
                if not sim.wait_for(test, timeout):
                    raise TimeoutError(f"{name}: {sim.count()} pods, {sim.running} Running after {timeout:.0f} s")
                meter.mark(name)
            bench.wait_job(namespace, "big", ready(size), timeout)
            meter.mark("ready")
            meter.stop()
            try:
                if behave:
                    big_job_phases(bench, sim, namespace, size, pid, timeout, rows)
            finally:
                for code, count in sorted(getattr(sim, "refused", {}).items()):
                    print(
                        f"{size} workers: the simulated kubelet's status patch refused {count}x with HTTP {code}, "
                        f"first answer: {sim.refusal_bodies[code]}",
                        file=sys.stderr,
                        flush=True,
                    )
    except Exception as error:  # noqa: BLE001 - a failed size is a row of the table
        failed = rows[-1] if rows[-1].outcome == "ok" and not rows[-1].seconds.get("wall") else Row("", pods=size)
        failed.outcome = f"FAILED: {type(error).__name__}: {error}"[:200]
        if failed is not rows[-1]:
            failed.what = f"{size} workers: after the last phase"
            rows.append(failed)
    finally:
        if operator is not None:
            stop_operator(operator, bench.py_spy is not None)
    return rows


def run_ceiling(
    bench: Bench,
    size: int,
    concurrency: int,
    redis_url: str,
    timeout: float,
    rows: list[Row],
    kubelet: Callable[..., Any] = SimKubelet,
) -> None:
    """The bare client's pods/s (:mod:`bench.create_ceiling`) for ``size`` pods, under the
    same simulated kubelet: a row appended to ``rows``; never raises."""
    namespace = f"ceiling-{size}-{concurrency}"
    row = Row(f"{size} pods, bare client ({concurrency} in flight, no operator)", pods=size)
    rows.append(row)
    try:
        bench.core.create_namespace({"metadata": {"name": namespace}})
        body = job("big", size, redis_url)
        owner = bench.custom.create_namespaced_custom_object(*API, namespace, "rolloutjobs", body)
        body["metadata"]["namespace"] = namespace
        bodies = create_ceiling.pod_bodies(body, owner["metadata"]["uid"], size, operator_env(bench.kubeconfig))
        pdb = create_ceiling.pdb_body(body, owner["metadata"]["uid"])
        client.PolicyV1Api(bench.api).create_namespaced_pod_disruption_budget(namespace, pdb)
        settings = client.Configuration()
        config.load_kube_config(config_file=bench.kubeconfig, client_configuration=settings)
        settings.connection_pool_maxsize = concurrency
        with client.ApiClient(settings) as api, kubelet(bench.api, namespace) as sim:
            meter = Meter(bench, None, row).start()
            seconds, created = create_ceiling.post_all(api, namespace, bodies, concurrency)
            row.seconds["created"] = seconds
            if created < size:
                raise RuntimeError(f"the API server created {created} of {size} pods")
            if not sim.wait_for(lambda: sim.running >= size, timeout):
                raise TimeoutError(f"{sim.running} of {size} Running after {timeout:.0f} s")
            meter.mark("running")
            meter.stop()
    except Exception as error:  # noqa: BLE001 - a failed measurement is a row of the table
        row.outcome = f"FAILED: {type(error).__name__}: {error}"[:200]


def stop_operator(operator: Any, profiled: bool) -> None:
    """Stop the operator; under py-spy, the operator first, so that py-spy writes its profile."""
    if profiled:
        with contextlib.suppress(OSError):
            os.kill(python_pid(operator.pid), signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            operator.wait(60)
    children.stop(operator)


def big_job_phases(
    bench: Bench, sim: SimKubelet, namespace: str, size: int, pid: int, timeout: float, rows: list[Row]
) -> None:
    """Scale to 100 and back, a rolled spec change, deletion: each a row appended to ``rows``
    (raises on a failure)."""

    def phase(what: str, patch: dict[str, Any] | None, wait: Callable[[Meter], None]) -> None:
        row = Row(what, pods=size)
        rows.append(row)
        meter = Meter(bench, pid, row).start()
        if patch is not None:
            bench.custom.patch_namespaced_custom_object(*API, namespace, "rolloutjobs", "big", patch)
        wait(meter)
        meter.stop()

    def settled(target: int) -> Callable[[Meter], None]:
        def wait(meter: Meter) -> None:
            if not sim.wait_for(lambda: sim.count() == target and sim.running == target, timeout):
                raise TimeoutError(f"{sim.count()} pods, {sim.running} Running, want {target}")
            bench.wait_job(namespace, "big", ready(target), timeout)
            meter.mark("settled")

        return wait

    small = 100
    phase(f"{size} -> {small} workers (scale down)", {"spec": {"replicas": small}}, settled(small))
    phase(f"{small} -> {size} workers (scale up)", {"spec": {"replicas": size}}, settled(size))

    def rolled(meter: Meter) -> None:
        if not sim.wait_for(lambda: sim.old_left == 0 and sim.running == size, timeout):
            raise TimeoutError(f"{sim.old_left} pods of the old spec left, {sim.running} Running")
        bench.wait_job(namespace, "big", ready(size), timeout)
        meter.mark("rolled")
        rows[-1].outcome = f"ok; fewest Running during the roll: {sim.low_water} (of {size})"

    sim.mark_old()
    phase(f"{size} workers: spec change, rolled", {"spec": {"env": {"numEnvs": 3}}}, rolled)

    def gone(meter: Meter) -> None:
        if not sim.wait_for(lambda: sim.count() == 0, timeout):
            raise TimeoutError(f"{sim.count()} pods left")
        bench.wait_job(namespace, "big", lambda body: body is None, timeout)
        meter.mark("gone")

    def delete(meter: Meter) -> None:
        bench.custom.delete_namespaced_custom_object(*API, namespace, "rolloutjobs", "big")
        gone(meter)

    phase(f"{size} workers: job deleted -> all pods gone", None, delete)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--big", action="store_true", help=f"add a {BIG}-worker job (minutes)")
    parser.add_argument("--behave", action="store_true", help="the largest job: scale, roll, delete")
    parser.add_argument("--restart", action="store_true", help="SIGKILL -> replacement's first batch (real workers)")
    parser.add_argument(
        "--ceiling",
        type=int,
        nargs="*",
        default=[16, API_CONCURRENCY],
        metavar="IN_FLIGHT",
        help="after each size, a bare client creates as many pods, this many in flight (none: skip)",
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds each phase may take")
    parser.add_argument("--py-spy", help="path of a py-spy binary: profile each operator (raw stacks in the work dir)")
    args = parser.parse_args(argv)
    sizes = args.sizes + ([BIG] if args.big and BIG not in args.sizes else [])
    work = Path(tempfile.mkdtemp(prefix="bench-operator-"))
    children.guard()
    rows: list[Row] = []
    bench: Bench | None = None
    redis = EmbeddedRedis().start()
    try:
        bench = Bench(work, args.py_spy)
        if args.restart:
            from bench.operator_restart import measure_restart

            print("\n".join(measure_restart(bench.kubeconfig, bench.core, bench.custom, redis.url, work)))
        for size in sizes:
            done = len(rows)
            run_size(bench, size, redis.url, args.timeout, args.behave and size == max(sizes), rows=rows)
            ceilings = []
            for concurrency in args.ceiling:
                run_ceiling(bench, size, concurrency, redis.url, args.timeout, ceilings)
            best = max((r.created_per_s() for r in ceilings if r.outcome == "ok"), default=float("nan"))
            rows[done].ceiling = best
            rows.extend(ceilings)
            print("\n".join(render(rows[done:], os.cpu_count() or 1)), flush=True)
    finally:  # also on SIGTERM/SIGHUP (SystemExit): stop everything, then print what was measured
        children.kill_all()
        redis.stop()
        if bench is not None or (work / "cluster").exists():
            subprocess.run([str(REPO / "hack/cluster/down.sh"), str(work / "cluster")], capture_output=True)
        load = os.getloadavg()
        print(f"\nOperator on the local control plane ({os.cpu_count()} cores, load {load[0]:.1f}; work dir {work})")
        print("\n".join(render(rows, os.cpu_count() or 1)))
        if rows:  # the tables as JSON too, for bench.plot_results
            results.write("bench_operator", operator_results.tables(rows), results.machine())
    return 0 if all(r.outcome.startswith("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
