"""A test kubelet: one Node whose pods are local processes. Test infrastructure, not product.

The control plane of ``hack/cluster`` has no scheduler and no kubelet. This object plays
both for one Node, through the real API server:

* registers the Node (allocatable cpu, memory, pods, ``nvidia.com/gpu``), keeps its Ready
  condition and its Lease fresh;
* schedules: binds each pending pod (no nodeName) to the node when its resource requests
  fit what is left of allocatable; otherwise sets PodScheduled=False, reason
  Unschedulable, with a message naming the resource, and tries again later;
* runs each bound pod's first container ``command + args`` as a local process (the image
  is ignored) with the pod's env (``value``, ``secretKeyRef``, ``configMapKeyRef``,
  ``fieldRef``); an env value equal to the container's ``terminationMessagePath`` is
  pointed at a per-pod file, which is read back as the terminated state's message (as
  the kubelet's mount would); processes share this host's network;
* reports status: Pending -> Running (startedAt) -> Succeeded/Failed (exit code, reason,
  message), ``Ready`` from the readiness probe (``httpGet`` on 127.0.0.1);
* on deletion sends SIGTERM, waits the grace period, SIGKILLs, then removes the pod;
* :meth:`kill` lets a test crash a pod's process.

``simulate=True`` runs no processes: bound pods go straight to Running and Ready (for
benchmarks with 1 000 pods). Pods run as this user, not the pod's ``runAsUser``.

Run standalone: ``python tests/cluster/kubelet.py --kubeconfig .cluster/kubeconfig``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import logging
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("test-kubelet")

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3}


def quantity(value: Any) -> float:
    """A Kubernetes quantity ('500m', '2Gi', 3) as a number."""
    text = str(value).strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * _SUFFIX[suffix]
    return float(text)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class RunningPod:
    namespace: str
    name: str
    uid: str
    process: subprocess.Popen[bytes] | None
    message_file: Path
    log_file: Path
    probe: dict[str, Any] | None
    started_at: str
    ready: bool = False
    stopping: bool = False
    finished: bool = False
    next_probe: float = 0.0
    fallback_to_logs: bool = False


@dataclass
class LocalKubelet:
    kubeconfig: str
    node_name: str = "rolloutfleet-test-node"
    cpu: str = "64"
    memory: str = "256Gi"
    max_pods: int = 2000
    gpus: int = 0
    simulate: bool = False
    work_dir: Path | None = None
    pods: dict[tuple[str, str], RunningPod] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.api_client = config.new_client_from_config(config_file=self.kubeconfig)
        self.core = client.CoreV1Api(self.api_client)
        self.coordination = client.CoordinationV1Api(self.api_client)
        self.work_dir = Path(self.work_dir or tempfile.mkdtemp(prefix="test-kubelet-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._stop = threading.Event()
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._cache: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.RLock()
        self._threads: list[threading.Thread] = []
        self._unschedulable_reported: dict[tuple[str, str], str] = {}

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> LocalKubelet:
        self._register_node()
        for target, name in (
            (self._watch_pods, "watch"),
            (self._handle_events, "handle"),
            (self._heartbeat, "heartbeat"),
            (self._supervise, "supervise"),
        ):
            thread = threading.Thread(target=target, name=f"kubelet-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop watching; kill every process this kubelet started (nothing outlives it)."""
        self._stop.set()
        with self._lock:
            running = [p for p in self.pods.values() if p.process is not None and p.process.poll() is None]
        for pod in running:
            assert pod.process is not None
            _signal_group(pod.process, signal.SIGKILL)
            pod.process.wait()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> LocalKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- for tests -----------------------------------------------------------------

    def kill(self, namespace: str, name: str, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to a pod's process group (a crash); returns the pid."""
        with self._lock:
            pod = self.pods[(namespace, name)]
        assert pod.process is not None, f"{namespace}/{name} runs no process"
        _signal_group(pod.process, sig)
        return pod.process.pid

    def pid(self, namespace: str, name: str) -> int | None:
        with self._lock:
            pod = self.pods.get((namespace, name))
        return None if pod is None or pod.process is None else pod.process.pid

    def log_path(self, namespace: str, name: str) -> Path:
        assert self.work_dir is not None
        return self.work_dir / f"{namespace}_{name}.log"

    # -- node ------------------------------------------------------------------------

    def _allocatable(self) -> dict[str, str]:
        return {"cpu": self.cpu, "memory": self.memory, "pods": str(self.max_pods), "nvidia.com/gpu": str(self.gpus)}

    def _register_node(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node_name, "labels": {"kubernetes.io/hostname": self.node_name}},
        }
        try:
            self.core.create_node(node)
        except ApiException as error:
            if error.status != 409:
                raise
        self._node_status()

    def _node_status(self) -> None:
        now = _now()
        status = {
            "status": {
                "capacity": self._allocatable(),
                "allocatable": self._allocatable(),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "test kubelet is posting ready status",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": "",
                    "containerRuntimeVersion": "local-process://1",
                    "kernelVersion": "",
                    "kubeProxyVersion": "",
                    "kubeletVersion": "v1.35.8",
                    "machineID": "",
                    "operatingSystem": "linux",
                    "osImage": "test kubelet",
                    "systemUUID": "",
                },
            }
        }
        self.core.patch_node_status(self.node_name, status)

    def _renew_lease(self) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.node_name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": self.node_name,
                "leaseDurationSeconds": 40,
                "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }
        try:
            self.coordination.patch_namespaced_lease(self.node_name, "kube-node-lease", {"spec": body["spec"]})
        except ApiException as error:
            if error.status != 404:
                raise
            self.coordination.create_namespaced_lease("kube-node-lease", body)

    def _heartbeat(self) -> None:
        while not self._stop.is_set():
            try:
                self._renew_lease()
                self._node_status()
            except Exception:
                log.exception("heartbeat failed")
            self._stop.wait(10)

    # -- watching ----------------------------------------------------------------------

    def _watch_pods(self) -> None:
        resource_version = ""
        while not self._stop.is_set():
            try:
                if not resource_version:
                    listed = self.core.list_pod_for_all_namespaces()
                    resource_version = listed.metadata.resource_version
                    for item in listed.items:
                        self._events.put(self.api_client.sanitize_for_serialization(item))
                stream = watch.Watch().stream(
                    self.core.list_pod_for_all_namespaces,
                    resource_version=resource_version,
                    timeout_seconds=30,
                    allow_watch_bookmarks=True,
                )
                for event in stream:
                    if self._stop.is_set():
                        return
                    obj = event["raw_object"]
                    resource_version = obj["metadata"].get("resourceVersion", resource_version)
                    if event["type"] == "BOOKMARK":
                        continue
                    if event["type"] == "DELETED":
                        obj["_deleted"] = True
                    self._events.put(obj)
            except ApiException as error:
                if error.status == 410:
                    resource_version = ""  # too old: list again
                    continue
                log.warning("pod watch failed: %s", error)
                self._stop.wait(1)
            except Exception:
                log.exception("pod watch failed")
                resource_version = ""
                self._stop.wait(1)

    def _handle_events(self) -> None:
        while not self._stop.is_set():
            try:
                pod = self._events.get(timeout=1.0)
            except queue.Empty:
                self._retry_pending()
                continue
            try:
                self._handle(pod)
            except Exception:
                log.exception("handling pod %s failed", pod.get("metadata", {}).get("name"))

    def _handle(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        if pod.get("_deleted"):
            self._cache.pop(key, None)
            with self._lock:
                running = self.pods.get(key)
            if running is not None and running.uid == meta.get("uid"):
                self._terminate(running, grace=0, remove=False)
                with self._lock:
                    self.pods.pop(key, None)
            return
        self._cache[key] = pod
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        if meta.get("deletionTimestamp"):
            if node == self.node_name:
                with self._lock:
                    running = self.pods.get(key)
                grace = int(meta.get("deletionGracePeriodSeconds") or 0)
                if running is None or running.uid != meta["uid"]:
                    self._remove(key, meta["uid"])
                elif not running.stopping:
                    running.stopping = True
                    threading.Thread(target=self._terminate, args=(running, grace), daemon=True).start()
            return
        if not node and status.get("phase", "Pending") == "Pending":
            self._schedule(pod)
        elif node == self.node_name:
            with self._lock:
                known = self.pods.get(key)
            if (known is None or known.uid != meta["uid"]) and status.get("phase", "Pending") == "Pending":
                self._start(pod)

    def _retry_pending(self) -> None:
        for pod in list(self._cache.values()):
            if not (pod.get("spec") or {}).get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                self._schedule(pod)

    # -- scheduling ----------------------------------------------------------------------

    @staticmethod
    def _requests(pod: dict[str, Any]) -> dict[str, float]:
        total: dict[str, float] = {"pods": 1.0}
        for container in (pod.get("spec") or {}).get("containers") or []:
            resources = container.get("resources") or {}
            wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for name, value in wanted.items():
                total[name] = total.get(name, 0.0) + quantity(value)
        return total

    def _schedule(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        used: dict[str, float] = {}
        for other in self._cache.values():
            if (other.get("spec") or {}).get("nodeName") == self.node_name and (other.get("status") or {}).get(
                "phase"
            ) not in ("Succeeded", "Failed"):
                for name, value in self._requests(other).items():
                    used[name] = used.get(name, 0.0) + value
        allocatable = {k: quantity(v) for k, v in self._allocatable().items()}
        for name, value in self._requests(pod).items():
            free = allocatable.get(name, 0.0) - used.get(name, 0.0)
            if value > free + 1e-9:
                message = f"0/1 nodes are available: 1 Insufficient {name}."
                if self._unschedulable_reported.get(key) != message:
                    self._unschedulable_reported[key] = message
                    self._patch_status(
                        key,
                        {
                            "conditions": [
                                {
                                    "type": "PodScheduled",
                                    "status": "False",
                                    "reason": "Unschedulable",
                                    "message": message,
                                    "lastTransitionTime": _now(),
                                }
                            ]
                        },
                    )
                return
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name},
        }
        try:
            self.core.create_namespaced_pod_binding(meta["name"], meta["namespace"], binding, _preload_content=False)
        except ApiException as error:
            if error.status not in (404, 409):
                raise
            return
        self._unschedulable_reported.pop(key, None)
        pod.setdefault("spec", {})["nodeName"] = self.node_name  # counts as used until the watch says so

    # -- running ---------------------------------------------------------------------------

    def _env(self, pod: dict[str, Any], container: dict[str, Any], message_file: Path) -> dict[str, str]:
        namespace = pod["metadata"]["namespace"]
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV")}
        message_path = container.get("terminationMessagePath") or "/dev/termination-log"
        for var in container.get("env") or []:
            if "value" in var:
                value = str(var["value"])
            elif "valueFrom" in var:
                value = self._value_from(namespace, pod, var["valueFrom"])
            else:
                value = ""
            env[var["name"]] = str(message_file) if value == message_path else value
        return env

    def _value_from(self, namespace: str, pod: dict[str, Any], source: dict[str, Any]) -> str:
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            secret = self.core.read_namespaced_secret(ref["name"], namespace)
            return base64.b64decode((secret.data or {})[ref["key"]]).decode()
        if "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            return str((self.core.read_namespaced_config_map(ref["name"], namespace).data or {})[ref["key"]])
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            fields = {
                "metadata.name": pod["metadata"]["name"],
                "metadata.namespace": namespace,
                "metadata.uid": pod["metadata"]["uid"],
                "spec.nodeName": self.node_name,
                "status.podIP": "127.0.0.1",
                "status.hostIP": "127.0.0.1",
            }
            return fields.get(path, "")
        return ""

    def _start(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        container = pod["spec"]["containers"][0]
        assert self.work_dir is not None
        message_file = self.work_dir / f"{key[0]}_{key[1]}.termination"
        message_file.write_text("")
        log_file = self.log_path(*key)
        started = _now()
        process = None
        if not self.simulate:
            try:
                env = self._env(pod, container, message_file)
            except (ApiException, KeyError) as error:
                self._patch_status(
                    key,
                    {
                        "containerStatuses": [
                            {
                                "name": container["name"],
                                "ready": False,
                                "restartCount": 0,
                                "image": container.get("image", ""),
                                "imageID": "",
                                "state": {
                                    "waiting": {"reason": "CreateContainerConfigError", "message": str(error)[:200]}
                                },
                            }
                        ]
                    },
                )
                return
            argv = list(container.get("command") or []) + list(container.get("args") or [])
            try:
                with log_file.open("ab") as out:
                    process = subprocess.Popen(
                        argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.work_dir
                    )
            except OSError as error:  # what a runtime reports when the entrypoint can't start
                self._patch_status(
                    key,
                    {
                        "phase": "Failed",
                        "containerStatuses": [
                            {
                                "name": container["name"],
                                "ready": False,
                                "restartCount": 0,
                                "image": container.get("image", ""),
                                "imageID": "",
                                "state": {
                                    "terminated": {
                                        "exitCode": 128,
                                        "reason": "StartError",
                                        "message": str(error),
                                        "startedAt": started,
                                        "finishedAt": _now(),
                                    }
                                },
                            }
                        ],
                    },
                )
                return
        probe = (container.get("readinessProbe") or {}).get("httpGet")
        running = RunningPod(
            namespace=key[0],
            name=key[1],
            uid=meta["uid"],
            process=process,
            message_file=message_file,
            log_file=log_file,
            probe=probe,
            started_at=started,
            ready=probe is None,
            fallback_to_logs=container.get("terminationMessagePolicy") == "FallbackToLogsOnError",
        )
        with self._lock:
            self.pods[key] = running
        self._report_running(running, container)

    def _report_running(self, pod: RunningPod, container: dict[str, Any] | None = None) -> None:
        ready = "True" if pod.ready else "False"
        now = _now()
        status = {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": pod.started_at,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": pod.started_at},
                {"type": "Initialized", "status": "True", "lastTransitionTime": pod.started_at},
                {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
                {"type": "Ready", "status": ready, "lastTransitionTime": now},
            ],
            "containerStatuses": [
                {
                    "name": (container or {}).get("name", "worker") if container else self._container_name(pod),
                    "ready": pod.ready,
                    "started": True,
                    "restartCount": 0,
                    "image": (container or {}).get("image", "local"),
                    "imageID": "",
                    "state": {"running": {"startedAt": pod.started_at}},
                }
            ],
        }
        self._patch_status((pod.namespace, pod.name), status)

    def _container_name(self, pod: RunningPod) -> str:
        cached = self._cache.get((pod.namespace, pod.name)) or {}
        containers = (cached.get("spec") or {}).get("containers") or [{}]
        return str(containers[0].get("name", "worker"))

    def _supervise(self) -> None:
        """Notice exits, run readiness probes."""
        while not self._stop.wait(0.1):
            with self._lock:
                pods = list(self.pods.values())
            for pod in pods:
                try:
                    if pod.finished:
                        continue
                    if pod.process is not None and pod.process.poll() is not None:
                        self._report_exit(pod)
                    elif pod.probe is not None and not pod.stopping and time.monotonic() >= pod.next_probe:
                        pod.next_probe = time.monotonic() + 0.5
                        ready = _http_ok(pod.probe)
                        if ready != pod.ready:
                            pod.ready = ready
                            self._report_running(pod)
                except Exception:
                    log.exception("supervising %s/%s failed", pod.namespace, pod.name)

    def _report_exit(self, pod: RunningPod) -> None:
        assert pod.process is not None
        pod.finished = True
        code = pod.process.returncode
        exit_code = 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a runtime reports
        try:
            message = pod.message_file.read_text(errors="replace")[-4096:]
        except OSError:
            message = ""
        if not message.strip() and exit_code != 0 and pod.fallback_to_logs:
            try:
                message = "\n".join(pod.log_file.read_text(errors="replace").splitlines()[-10:])
            except OSError:
                message = ""
        terminated = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": pod.started_at,
            "finishedAt": _now(),
        }
        if code < 0:
            terminated["signal"] = -code
        if message.strip():
            terminated["message"] = message
        if pod.stopping:
            return  # being deleted: the pod object goes away, no final phase to report
        self._patch_status(
            (pod.namespace, pod.name),
            {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "conditions": [
                    {
                        "type": "ContainersReady",
                        "status": "False",
                        "reason": "PodCompleted",
                        "lastTransitionTime": _now(),
                    },
                    {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": _now()},
                ],
                "containerStatuses": [
                    {
                        "name": self._container_name(pod),
                        "ready": False,
                        "started": False,
                        "restartCount": 0,
                        "image": "local",
                        "imageID": "",
                        "state": {"terminated": terminated},
                    }
                ],
            },
        )

    def _terminate(self, pod: RunningPod, grace: int, remove: bool = True) -> None:
        process = pod.process
        pod.stopping = True
        if process is not None and process.poll() is None:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=grace if grace > 0 else 0.01)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
        pod.finished = True
        if remove:
            self._remove((pod.namespace, pod.name), pod.uid)

    def _remove(self, key: tuple[str, str], uid: str) -> None:
        """The kubelet's final delete: the containers are gone, the object may go."""
        try:
            self.core.delete_namespaced_pod(
                key[1],
                key[0],
                grace_period_seconds=0,
                body=client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)),
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def _patch_status(self, key: tuple[str, str], status: dict[str, Any]) -> None:
        try:
            self.core.patch_namespaced_pod_status(key[1], key[0], {"status": status})
        except ApiException as error:
            if error.status != 404:  # deleted meanwhile
                raise


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def _http_ok(probe: dict[str, Any]) -> bool:
    url = f"http://127.0.0.1:{probe['port']}{probe.get('path', '/')}"
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return 200 <= int(response.status) < 400
    except (urllib.error.URLError, OSError, ValueError):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description="a test kubelet: one Node whose pods are local processes")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node-name", default="rolloutfleet-test-node")
    parser.add_argument("--cpu", default="64")
    parser.add_argument("--memory", default="256Gi")
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--simulate", action="store_true", help="run no processes: pods go Running and Ready")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    kubelet = LocalKubelet(
        args.kubeconfig, args.node_name, args.cpu, args.memory, gpus=args.gpus, simulate=args.simulate
    ).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    kubelet.stop()


if __name__ == "__main__":
    main()
