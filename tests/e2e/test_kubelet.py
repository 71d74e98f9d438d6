"""The test kubelet against the real API server: what the e2e tests rely on it for.

Every assertion is on the API server's answer (pod phase, conditions, container states,
events) or on real processes (files they write, pids that exist or not).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from rolloutfleet.fleet.embedded_redis import free_port
from tests.cluster.kubelet import SLEEPER_ANNOTATION, LocalKubelet
from tests.e2e.cluster_kit import REPO, Cluster, pod_json, wait_for


def make_pod(name: str, script: str, **extra: Any) -> dict[str, Any]:
    """A pod whose one container runs ``script`` with this Python (the image is ignored)."""
    container = {"name": "main", "image": "ignored", "command": [sys.executable, "-c", textwrap.dedent(script)]}
    container.update(extra.pop("container", {}))
    metadata = {"name": name, **extra.pop("metadata", {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"restartPolicy": "Never", "containers": [container], **extra},
    }


def wait_file(path: Path) -> str:
    """Python source: block until ``path`` exists."""
    return f"import os, time\nwhile not os.path.exists({str(path)!r}):\n    time.sleep(0.05)\n"


def status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    pod = pod_json(cluster, namespace, name)
    assert pod is not None, f"{namespace}/{name} is gone"
    return dict(pod.get("status") or {})


def phase(cluster: Cluster, namespace: str, name: str) -> str | None:
    pod = pod_json(cluster, namespace, name)
    return None if pod is None else pod["status"].get("phase")


def state(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    statuses = status(cluster, namespace, name).get("containerStatuses") or [{}]
    return dict(statuses[0].get("state") or {})


def condition(cluster: Cluster, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
    conditions = status(cluster, namespace, name).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def unschedulable(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    found = condition(cluster, namespace, name, "PodScheduled")
    return found if found and found["status"] == "False" and found.get("reason") == "Unschedulable" else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def events(core: client.CoreV1Api, namespace: str, name: str) -> list[tuple[str, str]]:
    found = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [(e.reason, e.message) for e in found]


def test_a_pod_runs_with_its_env_and_succeeds(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    core.create_namespaced_secret(namespace, {"metadata": {"name": "creds"}, "stringData": {"token": "hunter2"}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "cfg"}, "data": {"mode": "fast"}})
    go, seen = tmp_path / "go", tmp_path / "env.json"
    names = ["FROM_SECRET", "FROM_MAP", "POD_NAME", "POD_NAMESPACE", "ROLE", "GREETING", "HOSTNAME", "SECRET_FILE"]
    script = (
        wait_file(go)
        + f"import json; json.dump({{k: os.environ.get(k) for k in {names!r}}}, open({str(seen)!r}, 'w'))\n"
    )
    env = [
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "FROM_MAP", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['role']"}}},
        {"name": "GREETING", "value": "hello $(POD_NAME) in $(FROM_MAP) mode, $$(kept)"},
        {"name": "ABSENT", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "x", "optional": True}}},
    ]
    pod = make_pod("ok", script, container={"env": env}, metadata={"labels": {"role": "sampler"}})
    core.create_namespaced_pod(namespace, pod)

    # Running first, as the API server reports it: bound to the node, process started.
    wait_for(lambda: phase(cluster, namespace, "ok") == "Running", 30)
    running = state(cluster, namespace, "ok")["running"]
    assert running["startedAt"]
    scheduled = condition(cluster, namespace, "ok", "PodScheduled")
    assert scheduled is not None and scheduled["status"] == "True"
    assert (pod_json(cluster, namespace, "ok") or {})["spec"]["nodeName"] == kubelet.node_name

    go.touch()
    wait_for(lambda: phase(cluster, namespace, "ok") == "Succeeded", 30)
    terminated = state(cluster, namespace, "ok")["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    assert json.loads(seen.read_text()) == {
        "FROM_SECRET": "hunter2",
        "FROM_MAP": "fast",
        "POD_NAME": "ok",
        "POD_NAMESPACE": namespace,
        "ROLE": "sampler",
        "GREETING": "hello ok in fast mode, $(kept)",
        "HOSTNAME": "ok",
        "SECRET_FILE": None,
    }


def test_a_failing_pod_reports_its_exit_code_and_termination_message(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str
) -> None:
    script = """
        import os, sys
        open(os.environ["MESSAGE_FILE"], "w").write("the env cannot be built: no module named foo\\n")
        sys.exit(3)
    """
    env = [{"name": "MESSAGE_FILE", "value": "/dev/termination-log"}]
    core.create_namespaced_pod(namespace, make_pod("bad", script, container={"env": env}))
    wait_for(lambda: phase(cluster, namespace, "bad") == "Failed", 30)
    terminated = state(cluster, namespace, "bad")["terminated"]
    assert terminated["exitCode"] == 3 and terminated["reason"] == "Error"
    assert terminated["message"] == "the env cannot be built: no module named foo\n"
    ready = condition(cluster, namespace, "bad", "Ready")
    assert ready is not None and ready["status"] == "False"


def test_fallback_to_logs_on_error_reports_the_output_tail(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str
) -> None:
    script = "import sys\nfor i in range(200): print('line', i, flush=True)\nsys.exit('fatal: the last words')\n"
    container = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    core.create_namespaced_pod(namespace, make_pod("loud", script, container=container))
    wait_for(lambda: phase(cluster, namespace, "loud") == "Failed", 30)
    terminated = state(cluster, namespace, "loud")["terminated"]
    assert terminated["exitCode"] == 1
    assert terminated["message"].splitlines()[-1] == "fatal: the last words"
    assert "line 199" in terminated["message"] and "line 0\n" not in terminated["message"]


def test_readiness_follows_the_probe_and_a_killed_process_fails_the_pod(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    port = free_port()
    go = tmp_path / "serve"
    script = wait_file(go) + textwrap.dedent(f"""
        import http.server
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200 if self.path == "/readyz" else 404)
                self.end_headers()
        http.server.HTTPServer(("127.0.0.1", {port}), Handler).serve_forever()
    """)
    container = {
        "ports": [{"name": "metrics", "containerPort": port}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 5},
    }
    core.create_namespaced_pod(namespace, make_pod("web", script, container=container))

    def ready() -> str | None:
        found = condition(cluster, namespace, "web", "Ready")
        return None if found is None else found["status"]

    wait_for(lambda: phase(cluster, namespace, "web") == "Running", 30)
    time.sleep(1.0)  # several probe periods with nothing listening
    assert ready() == "False"
    assert status(cluster, namespace, "web")["containerStatuses"][0]["ready"] is False

    go.touch()
    wait_for(lambda: ready() == "True", 30)
    assert status(cluster, namespace, "web")["containerStatuses"][0]["ready"] is True

    pid = kubelet.kill(namespace, "web", signal.SIGKILL)
    wait_for(lambda: phase(cluster, namespace, "web") == "Failed", 30)
    terminated = state(cluster, namespace, "web")["terminated"]
    assert terminated["exitCode"] == 128 + signal.SIGKILL and terminated["reason"] == "Error"
    assert ready() == "False"
    assert not alive(pid)


def test_restart_policy_on_failure_restarts_after_a_back_off(
    cluster: Cluster,
    kubelet: LocalKubelet,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kubelet, "crash_backoff", 1.0)
    runs = tmp_path / "runs"
    script = f"""
        import pathlib, sys
        runs = pathlib.Path({str(runs)!r})
        runs.write_text(runs.read_text() + "x" if runs.exists() else "x")
        sys.exit(7 if len(runs.read_text()) == 1 else 0)
    """
    core.create_namespaced_pod(namespace, make_pod("flaky", script, restartPolicy="OnFailure"))
    wait_for(lambda: phase(cluster, namespace, "flaky") == "Succeeded", 30)
    container = status(cluster, namespace, "flaky")["containerStatuses"][0]
    assert container["restartCount"] == 1 and runs.read_text() == "xx"
    assert container["lastState"]["terminated"]["exitCode"] == 7
    assert container["state"]["terminated"]["exitCode"] == 0


def test_deleting_a_pod_sigterms_its_process_then_removes_it(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    marker, armed = tmp_path / "got-sigterm", tmp_path / "armed"
    script = f"""
        import signal, sys, time
        def bye(*_):
            open({str(marker)!r}, "w").write("SIGTERM")
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        open({str(armed)!r}, "w").close()
        while True:
            time.sleep(0.1)
    """
    core.create_namespaced_pod(namespace, make_pod("svc", script, terminationGracePeriodSeconds=30))
    wait_for(lambda: phase(cluster, namespace, "svc") == "Running", 30)
    pid = wait_for(lambda: kubelet.pid(namespace, "svc"), 10)
    wait_for(armed.exists, 30)  # the handler is installed
    started = time.monotonic()
    core.delete_namespaced_pod("svc", namespace)
    wait_for(lambda: pod_json(cluster, namespace, "svc") is None, 30)
    assert time.monotonic() - started < 10  # removed once the process exited, not after the grace period
    assert marker.read_text() == "SIGTERM"
    assert not alive(pid)


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    armed = tmp_path / "armed"
    script = f"import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nopen({str(armed)!r}, 'w').close()\nwhile True: time.sleep(0.1)\n"
    core.create_namespaced_pod(namespace, make_pod("stubborn", script, terminationGracePeriodSeconds=30))
    wait_for(lambda: phase(cluster, namespace, "stubborn") == "Running", 30)
    pid = wait_for(lambda: kubelet.pid(namespace, "stubborn"), 10)
    wait_for(armed.exists, 30)  # SIGTERM is ignored from now on
    started = time.monotonic()
    core.delete_namespaced_pod("stubborn", namespace, grace_period_seconds=2)
    time.sleep(1.0)
    assert alive(pid) and pod_json(cluster, namespace, "stubborn") is not None  # still within its grace
    wait_for(lambda: pod_json(cluster, namespace, "stubborn") is None, 30)
    assert 2.0 <= time.monotonic() - started < 10
    assert not alive(pid)


def test_resources_are_honoured_an_over_asked_pod_stays_pending(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    assert kubelet.gpus == 1
    gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    greedy = {"resources": {"limits": {"nvidia.com/gpu": "2"}}}
    core.create_namespaced_pod(namespace, make_pod("greedy", "print(1)", container=greedy))
    found = wait_for(lambda: unschedulable(cluster, namespace, "greedy"), 30)
    assert "Insufficient nvidia.com/gpu" in found["message"]
    pod = pod_json(cluster, namespace, "greedy")
    assert pod is not None and not pod["spec"].get("nodeName") and pod["status"]["phase"] == "Pending"
    assert any(reason == "FailedScheduling" for reason, _ in events(core, namespace, "greedy"))

    # One GPU: the first pod gets it, the second waits until the first is done.
    go = tmp_path / "release"
    core.create_namespaced_pod(namespace, make_pod("first", wait_file(go), container=gpu))
    wait_for(lambda: phase(cluster, namespace, "first") == "Running", 30)
    core.create_namespaced_pod(namespace, make_pod("second", "print(2)", container=gpu))
    wait_for(lambda: unschedulable(cluster, namespace, "second"), 30)
    go.touch()
    wait_for(lambda: phase(cluster, namespace, "second") == "Succeeded", 30)
    assert phase(cluster, namespace, "first") == "Succeeded"
    assert phase(cluster, namespace, "greedy") == "Pending"


def test_a_node_selector_that_matches_no_node_stays_pending(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str
) -> None:
    pod = make_pod("elsewhere", "print(1)", nodeSelector={"accelerator": "tpu"})
    core.create_namespaced_pod(namespace, pod)
    found = wait_for(lambda: unschedulable(cluster, namespace, "elsewhere"), 30)
    assert "node affinity/selector" in found["message"]


def test_a_cordoned_node_takes_no_new_pods_until_uncordoned(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str
) -> None:
    # What `kubectl drain` leaves behind: the node's spec.unschedulable. A real
    # kube-scheduler then reports the pod Unschedulable in these words.
    core.patch_node(kubelet.node_name, {"spec": {"unschedulable": True}})
    try:
        wait_for(lambda: kubelet.cordoned, 10)  # read once a second, like a scheduler's informer lag
        core.create_namespaced_pod(namespace, make_pod("cordoned", "print(1)"))
        found = wait_for(lambda: unschedulable(cluster, namespace, "cordoned"), 30)
        assert "1 node(s) were unschedulable" in found["message"]
    finally:
        core.patch_node(kubelet.node_name, {"spec": {"unschedulable": None}})
    wait_for(lambda: phase(cluster, namespace, "cordoned") == "Succeeded", 30)


def test_a_container_over_its_memory_limit_is_oom_killed(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str
) -> None:
    # 200 MiB touched (bytearray zero-fills every page) against a 64 MiB limit.
    hog = "block = bytearray(200 * 2**20)\nimport time\ntime.sleep(60)\n"
    limits = {"resources": {"limits": {"memory": "64Mi"}}}
    core.create_namespaced_pod(namespace, make_pod("hog", hog, container=limits))
    wait_for(lambda: phase(cluster, namespace, "hog") == "Failed", 30)
    terminated = state(cluster, namespace, "hog")["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137)
    # Under its limit the same program runs to its end.
    core.create_namespaced_pod(
        namespace,
        make_pod("fits", "block = bytearray(20 * 2**20)\n", container={"resources": {"limits": {"memory": "256Mi"}}}),
    )
    wait_for(lambda: phase(cluster, namespace, "fits") == "Succeeded", 30)


def test_a_missing_secret_waits_then_starts_once_it_exists(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str
) -> None:
    env = [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "late", "key": "password"}}}]
    script = "import os, sys\nsys.exit(0 if os.environ['PASSWORD'] == 'arrived' else 9)\n"
    core.create_namespaced_pod(namespace, make_pod("patient", script, container={"env": env}))

    def waiting() -> dict[str, Any] | None:
        statuses = status(cluster, namespace, "patient").get("containerStatuses") or [{}]
        return (statuses[0].get("state") or {}).get("waiting")

    found = wait_for(waiting, 30)
    assert found["reason"] == "CreateContainerConfigError" and 'secret "late" not found' in found["message"]
    assert phase(cluster, namespace, "patient") == "Pending"
    core.create_namespaced_secret(namespace, {"metadata": {"name": "late"}, "stringData": {"password": "arrived"}})
    wait_for(lambda: phase(cluster, namespace, "patient") == "Succeeded", 30)


def test_sleeper_annotation_runs_a_stand_in(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str
) -> None:
    pod = make_pod("sleepy", "raise SystemExit(5)", metadata={"annotations": {SLEEPER_ANNOTATION: "true"}})
    pod["spec"]["containers"][0]["readinessProbe"] = {"httpGet": {"path": "/readyz", "port": free_port()}}
    core.create_namespaced_pod(namespace, pod)
    wait_for(lambda: (condition(cluster, namespace, "sleepy", "Ready") or {}).get("status") == "True", 30)
    pid = kubelet.pid(namespace, "sleepy")
    assert pid is not None and Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == b"sleep"
    assert phase(cluster, namespace, "sleepy") == "Running"


# -- the kubelet as a command, as `make cluster-up` runs it ------------------------------------


@pytest.fixture
def cli_kubelet(cluster: Cluster, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Starts `python -m tests.cluster.kubelet` processes for a node of their own."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def container_pid(cluster: Cluster, namespace: str, name: str) -> int:
    """The pid the kubelet reports as the container's id (``local://PID``)."""
    container_id = status(cluster, namespace, name)["containerStatuses"][0]["containerID"]
    assert container_id.startswith("local://"), container_id
    return int(container_id.removeprefix("local://"))


def start_cli(cluster: Cluster, tmp_path: Path, *extra: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "tests.cluster.kubelet", "--kubeconfig", cluster.kubeconfig]
    args += ["--node-name", "cli-node", "--scheduler-name", "cli-scheduler", "--work-dir", str(tmp_path / "cli")]
    log = (tmp_path / "cli.log").open("ab")
    return subprocess.Popen([*args, *extra], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


def test_the_kubelet_command_leaves_no_process_behind_and_recovers_lost_pods(
    cluster: Cluster,
    kubelet: LocalKubelet,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    cli_kubelet: list[subprocess.Popen[bytes]],
) -> None:
    cli_kubelet.append(start_cli(cluster, tmp_path, "--sleeper"))
    pod = make_pod("far", "raise SystemExit(5)", schedulerName="cli-scheduler")
    core.create_namespaced_pod(namespace, pod)
    wait_for(lambda: phase(cluster, namespace, "far") == "Running", 30, lambda: (tmp_path / "cli.log").read_text())
    assert (pod_json(cluster, namespace, "far") or {})["spec"]["nodeName"] == "cli-node"
    pid = container_pid(cluster, namespace, "far")
    assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == b"sleep"

    # SIGKILLed: its process group leaders die with it (no orphan keeps running).
    cli_kubelet[0].kill()
    cli_kubelet[0].wait()
    wait_for(lambda: not alive(pid), 10)

    # A new kubelet for the node finds the pod Running without a process: lost, Failed.
    cli_kubelet.append(start_cli(cluster, tmp_path, "--sleeper"))
    wait_for(lambda: phase(cluster, namespace, "far") == "Failed", 30, lambda: (tmp_path / "cli.log").read_text())
    assert state(cluster, namespace, "far")["terminated"]["reason"] == "ContainerStatusUnknown"

    # SIGTERM: a clean stop, its processes killed.
    core.create_namespaced_pod(namespace, make_pod("near", "raise SystemExit(5)", schedulerName="cli-scheduler"))
    wait_for(lambda: phase(cluster, namespace, "near") == "Running", 30)
    pid = container_pid(cluster, namespace, "near")
    cli_kubelet[1].terminate()
    assert cli_kubelet[1].wait(timeout=20) == 0
    assert not alive(pid)
