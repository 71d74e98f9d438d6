"""A test kubelet: one Node whose pods are local processes. Test infrastructure, not product.

The control plane of ``hack/cluster`` has no scheduler and no kubelet. This object plays
both for one Node, through the real API server:

* **node**: registers the Node (capacity/allocatable cpu, memory, pods, ``nvidia.com/gpu``,
  labels), keeps its Ready condition and its Lease in ``kube-node-lease`` fresh;
* **scheduler**: binds each pending pod without ``nodeName`` whose ``schedulerName`` is
  this kubelet's (``default-scheduler`` unless told) through the ``pods/binding``
  subresource, when its ``nodeSelector`` matches the node's labels and its resource
  requests (requests, else limits, summed over containers, plus one pod) fit in
  allocatable minus what the node's non-terminal pods already request. Otherwise it
  sets ``PodScheduled=False``, reason ``Unschedulable``, with a message naming what is
  missing, records a ``FailedScheduling`` event, and tries again every second;
* **runtime**: starts each container of a bound pod as a local process group (image
  ignored; ``command + args`` with ``$(VAR)`` expansion) with the pod's env (``value``,
  ``valueFrom`` ``secretKeyRef`` / ``configMapKeyRef`` / ``fieldRef``, ``envFrom``). An env
  value equal to the container's ``terminationMessagePath`` is pointed at a per-container
  file, read back on exit as the terminated state's ``message`` (what the kubelet's mount
  of that path does); ``FallbackToLogsOnError`` falls back to the log's tail. A missing
  secret or key gives ``CreateContainerConfigError`` (retried). Processes share this
  host's network and run as this user (``securityContext`` is ignored);
* **status** (``pods/status``): Pending -> Running (``startedAt``) -> Succeeded/Failed
  (exit code, reason ``Completed``/``Error``, ``128+N`` for signal N, message);
  ``Ready`` follows the readiness probe (``httpGet`` on 127.0.0.1, every 0.5 s, faster than
  ``periodSeconds`` so tests don't wait); a failing liveness probe kills the container
  (timing as specified). ``restartPolicy`` ``Always``/``OnFailure`` (Deployments' pods)
  restart the container after a CrashLoopBackOff (10 s doubling to 300 s, ``restartCount``,
  ``lastState``); ``Never`` (the operator's pods) leaves the pod Failed/Succeeded;
* **deletion**: SIGTERM to the process group, SIGKILL once ``deletionGracePeriodSeconds``
  have passed, then, as a real kubelet does, the containers' exits in the pod's status
  (phase ``Succeeded``/``Failed`` while ``deletionTimestamp`` is set) and the final delete
  (grace 0, uid precondition);
* **memory**: a container whose process group holds more than its memory limit is
  SIGKILLed and reported ``OOMKilled`` (exit code 137);
* **cordon**: a Node with ``spec.unschedulable`` takes no new pods (``Unschedulable``, in
  kube-scheduler's words), unless they tolerate it;
* **several nodes**: kubelets of different ``node_name`` share one API server; each binds
  pods to its own node, and the API server lets one binding win (the other gets 409).
  Their pods share this host's network: ``port_offset`` shifts each container's declared
  ports (env values equal to one, probes) so two nodes' pods of one index don't collide;
* **partition** (:meth:`LocalKubelet.partition`): the node stops talking to the API server
  (no heartbeat, no binding, no status, no final delete, deaf to the watch) while its pods'
  processes keep running, as on a node cut off from the control plane;
* **for tests**: :meth:`LocalKubelet.kill` signals a pod's process (a crash),
  :meth:`LocalKubelet.pid` gives its pid, :meth:`LocalKubelet.log_path` its output,
  :meth:`LocalKubelet.exits` how its processes ended (also once the pod object is gone).

Modes for benchmarks with 1 000 pods: ``sleeper=True`` (or the pod annotation
``test-kubelet.rolloutfleet.io/sleeper: "true"``) runs ``sleep infinity`` in place of each
container's command and counts it ready; ``simulate=True`` runs no process at all.

Robustness: the pod watch resumes from its last resourceVersion (bookmarks on) and lists
again on 410 Gone; a relist drops what vanished meanwhile; only unbound pods and this
node's pods are kept; every loop blocks on a queue, an event or a timer; each container
is its own process group (and, with ``setpriv``, dies with the kubelet's thread that
started it); :meth:`LocalKubelet.stop` kills every group and joins every thread.
Pods that a previous kubelet of the same node left Running are reported Failed with
reason ``ContainerStatusUnknown``, as a real kubelet does for containers it lost.

In process (what the e2e fixtures do)::

    with LocalKubelet(kubeconfig, gpus=1, work_dir=tmp) as kubelet:
        ...

Standalone: ``python -m tests.cluster.kubelet --kubeconfig .cluster/kubeconfig`` from the
repository root (``tests/cluster/kubelet-up.sh`` starts it in the background for
``make cluster-up``).
"""

from __future__ import annotations

import argparse
import base64
import collections
import concurrent.futures
import contextlib
import json
import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger("test-kubelet")

SLEEPER_ANNOTATION = "test-kubelet.rolloutfleet.io/sleeper"
GPU = "nvidia.com/gpu"
TERMINAL = ("Succeeded", "Failed")
MAX_MESSAGE = 4096  # what the kubelet keeps of a termination message
FALLBACK_LINES = 80  # FallbackToLogsOnError: the log's last lines ...
FALLBACK_BYTES = 2048  # ... at most this many bytes
READINESS_PERIOD = 0.5
WRITERS = (
    8  # concurrent API writes (bindings, status, final deletes): the API server's latency, not ours, bounds a burst
)
SUPERVISE_PERIOD = 0.1
MEMORY_PERIOD = 0.5  # how often memory limits are checked (a real cgroup enforces them at once)
TICK = 1.0
# kube-scheduler v1.35's words for a pod that fits nowhere because the node is cordoned.
UNSCHEDULABLE_NODE = "0/1 nodes are available: 1 node(s) were unschedulable."
HEARTBEAT = 4.0  # the Lease and Ready condition: well inside up.sh's --node-monitor-grace-period (20 s)
LEASE_SECONDS = 40

_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}


_QUANTITY = re.compile(r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)([A-Za-z]*)")


def quantity(value: Any) -> float:
    """A Kubernetes quantity ('500m', '2Gi', '1e3', 3) as a number."""
    match = _QUANTITY.fullmatch(str(value).strip())
    if match is None or (match.group(2) and match.group(2) not in _SUFFIX):
        raise ValueError(f"not a quantity: {value!r}")
    return float(match.group(1)) * _SUFFIX.get(match.group(2), 1)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ConfigError(Exception):
    """The container's config can't be built (a missing secret, key, ...): CreateContainerConfigError."""


class _Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


@dataclass
class Container:
    name: str
    image: str
    process: subprocess.Popen[bytes] | None
    message_file: Path
    log_file: Path
    started_at: str
    readiness: dict[str, Any] | None = None
    liveness: dict[str, Any] | None = None
    ports: dict[str, int] = field(default_factory=dict)
    fallback_to_logs: bool = False
    ready: bool = False
    readiness_failures: int = 0
    liveness_failures: int = 0
    next_readiness: float = 0.0
    next_liveness: float = 0.0
    kill_at: float | None = None  # SIGKILL the group at this monotonic time (liveness kill)
    terminated: dict[str, Any] | None = None
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    restart_count: int = 0
    restart_at: float | None = None  # CrashLoopBackOff: start again at this monotonic time
    backoff: float = 0.0
    last_terminated: dict[str, Any] | None = None
    memory_limit: float | None = None  # bytes (resources.limits.memory)
    oom_killed: bool = False

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid


@dataclass
class RunningPod:
    namespace: str
    name: str
    uid: str
    containers: list[Container]
    started_at: str
    simulated: bool = False
    restart_policy: str = "Never"
    stopping: bool = False  # being deleted: SIGTERM sent
    kill_at: float | None = None  # SIGKILL at this monotonic time
    killed: bool = False
    removed: bool = False
    ready_since: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    last_status: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The first container's process."""
        return self.containers[0].process if self.containers else None

    @property
    def finished(self) -> bool:
        return not self.simulated and all(c.terminated is not None for c in self.containers)

    @property
    def ready(self) -> bool:
        return not self.finished and all(c.ready for c in self.containers)


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
    sleeper: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    scheduler_name: str = "default-scheduler"
    events: bool = True
    crash_backoff: float = 10.0  # first CrashLoopBackOff delay (doubles up to 300 s), as the kubelet's
    port_offset: int = 0  # added to every declared containerPort (pods of several nodes share this host)
    pods: dict[tuple[str, str], RunningPod] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return f"LocalKubelet(node={self.node_name!r}, pods={len(self.pods)}, work_dir={str(self.work_dir)!r})"

    def __post_init__(self) -> None:
        self.api_client = config.new_client_from_config(config_file=self.kubeconfig)
        self.core = client.CoreV1Api(self.api_client)
        self.coordination = client.CoordinationV1Api(self.api_client)
        self.work_dir = Path(self.work_dir or tempfile.mkdtemp(prefix="test-kubelet-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.node_labels = {
            "kubernetes.io/hostname": self.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **self.labels,
        }
        self._setpriv = shutil.which("setpriv")
        self._stop = threading.Event()
        self._partitioned = threading.Event()
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=10_000)
        self._lock = threading.RLock()  # guards self.pods
        self._threads: list[threading.Thread] = []
        self._watch_response: Any = None
        self._started_at = _now()
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None  # API writes off the sync thread
        # (namespace, pod, uid, container) -> terminated state, the latest 1000: outlives the pod object
        self._exits: collections.OrderedDict[tuple[str, str, str, str], dict[str, Any]] = collections.OrderedDict()
        # Owned by the sync thread:
        self._cache: dict[tuple[str, str], dict[str, Any]] = {}  # unbound pods and this node's
        self._assumed: dict[tuple[str, str], str] = {}  # bound by us, binding not yet seen: key -> uid
        self._requests_memo: dict[str, dict[str, float]] = {}  # uid -> requests
        self._unschedulable: dict[tuple[str, str], str] = {}  # key -> last reported message
        self._waiting: dict[tuple[str, str], tuple[str, float]] = {}  # config errors: key -> (uid, retry at)
        self.cordoned = False  # the Node's spec.unschedulable, read every tick

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> LocalKubelet:
        self._register_node()
        self._writer = concurrent.futures.ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="kubelet-write")
        for target, name in (
            (self._watch_loop, "watch"),
            (self._sync_loop, "sync"),
            (self._heartbeat_loop, "heartbeat"),
            (self._supervise_loop, "supervise"),
        ):
            thread = threading.Thread(target=target, name=f"kubelet-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("node %s registered; running pods in %s", self.node_name, self.work_dir)
        return self

    def stop(self) -> None:
        """Stop every thread and kill every process group this kubelet started (nothing outlives it)."""
        self._stop.set()
        response = self._watch_response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()  # unblocks the watch thread's read
        for thread in self._threads:
            thread.join(timeout=10)
        if self._writer is not None:
            self._writer.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            pods = list(self.pods.values())
        for pod in pods:
            for container in pod.containers:
                if container.process is not None and container.process.poll() is None:
                    _signal_group(container.process, signal.SIGKILL)
            for container in pod.containers:
                if container.process is not None:
                    container.process.wait()
                    _signal_group(container.process, signal.SIGKILL)  # any child left in the group
        self._threads.clear()

    def __enter__(self) -> LocalKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- for tests -----------------------------------------------------------------

    def _container(self, namespace: str, name: str, container: str | None) -> Container:
        with self._lock:
            pod = self.pods.get((namespace, name))
        if pod is None:
            raise KeyError(f"{namespace}/{name} is not running on {self.node_name}")
        for candidate in pod.containers:
            if container is None or candidate.name == container:
                return candidate
        raise KeyError(f"{namespace}/{name} has no container {container!r}")

    def kill(self, namespace: str, name: str, sig: int = signal.SIGKILL, container: str | None = None) -> int:
        """Send ``sig`` to a pod's container's process group (a crash); returns the pid."""
        target = self._container(namespace, name, container)
        assert target.process is not None, f"{namespace}/{name} runs no process"
        _signal_group(target.process, sig)
        return target.process.pid

    def partition(self) -> None:
        """Cut the node off from the API server for good (until :meth:`stop`): no heartbeat,
        no scheduling, no status, no final deletes, watch events ignored; the pods' processes
        keep running. The node lifecycle controller then marks the node unreachable."""
        self._partitioned.set()
        log.info("node %s partitioned: its pods keep running, the API server hears nothing", self.node_name)

    def pid(self, namespace: str, name: str, container: str | None = None) -> int | None:
        """The pid of a pod's (first or named) container, None while it runs none."""
        try:
            return self._container(namespace, name, container).pid
        except KeyError:
            return None

    def exits(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Terminated states of the pod's processes, oldest first, also of deleted pods (by uid)."""
        with self._lock:
            return [
                {"uid": uid, "container": container, **state}
                for (ns, pod, uid, container), state in self._exits.items()
                if (ns, pod) == (namespace, name)
            ]

    def log_path(self, namespace: str, name: str, container: str | None = None) -> Path:
        """Where a container's stdout+stderr go (the first container's without ``container``)."""
        assert self.work_dir is not None
        suffix = f"_{container}" if container else ""
        return self.work_dir / f"{namespace}_{name}{suffix}.log"

    def describe(self) -> str:
        """One line per pod this kubelet runs: for diagnostics."""
        with self._lock:
            pods = list(self.pods.values())
        lines = []
        for pod in pods:
            states = ", ".join(
                f"{c.name} pid={c.pid} ready={c.ready} exit={None if c.terminated is None else c.terminated['exitCode']}"
                for c in pod.containers
            )
            lines.append(f"{pod.namespace}/{pod.name} stopping={pod.stopping} {states or 'simulated'}")
        return "\n".join(lines) or "(no pods)"

    # -- node ------------------------------------------------------------------------

    def _allocatable(self) -> dict[str, str]:
        return {"cpu": self.cpu, "memory": self.memory, "pods": str(self.max_pods), GPU: str(self.gpus)}

    def _register_node(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node_name, "labels": self.node_labels},
        }
        try:
            self.core.create_node(node)
        except ApiException as error:
            if error.status != 409:
                raise
            self.core.patch_node(self.node_name, {"metadata": {"labels": self.node_labels}})
        self._node_status()
        self._renew_lease()

    def _node_status(self) -> None:
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
                        "lastHeartbeatTime": _now(),
                        "lastTransitionTime": self._started_at,
                    }
                ],
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": self.node_name},
                ],
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": "",
                    "containerRuntimeVersion": "local-process://1",
                    "kernelVersion": os.uname().release,
                    "kubeProxyVersion": "",
                    "kubeletVersion": "v1.35.8",
                    "machineID": "",
                    "operatingSystem": "linux",
                    "osImage": "rolloutfleet test kubelet",
                    "systemUUID": "",
                },
            }
        }
        self.core.patch_node_status(self.node_name, status)

    def _renew_lease(self) -> None:
        spec = {
            "holderIdentity": self.node_name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
        try:
            self.coordination.patch_namespaced_lease(self.node_name, "kube-node-lease", {"spec": spec})
        except ApiException as error:
            if error.status != 404:
                raise
            body = {"metadata": {"name": self.node_name, "namespace": "kube-node-lease"}, "spec": spec}
            with contextlib.suppress(ApiException):
                self.coordination.create_namespaced_lease("kube-node-lease", body)

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(HEARTBEAT):
            if self._partitioned.is_set():
                continue
            try:
                self._renew_lease()
                self._node_status()
            except Exception:
                log.exception("heartbeat failed")

    # -- watching ----------------------------------------------------------------------

    def _put(self, item: tuple[str, Any]) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=1.0)  # bounded: a slow consumer slows the watch
                return
            except queue.Full:
                continue

    def _watch_loop(self) -> None:
        resource_version: str | None = None
        backoff = 0.5
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._relist()
                resource_version = self._watch(resource_version)
                backoff = 0.5
            except _Gone:
                log.info("pod watch: resourceVersion %s too old, listing again", resource_version)
                resource_version = None
            except Exception as error:  # noqa: BLE001 - whatever broke the watch: back off, watch again
                if self._stop.is_set():
                    return
                if isinstance(error, ApiException) and error.status == 410:
                    resource_version = None
                    continue
                log.warning("pod watch failed (%s); retrying in %.1f s", error, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _relist(self) -> str:
        items: list[dict[str, Any]] = []
        resource_version = ""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": 500, "_preload_content": False, "_request_timeout": 60}
            if token:
                kwargs["_continue"] = token
            response = self.core.list_pod_for_all_namespaces(**kwargs)
            page = json.loads(response.data)
            items.extend(page.get("items") or [])
            metadata = page.get("metadata") or {}
            resource_version = resource_version or metadata.get("resourceVersion", "")
            token = metadata.get("continue")
            if not token:
                break
        self._put(("list", items))
        return resource_version

    def _watch(self, resource_version: str) -> str:
        response = self.core.list_pod_for_all_namespaces(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=300,
            _preload_content=False,
            _request_timeout=(10, 330),
        )
        self._watch_response = response
        try:
            if response.status == 410:
                raise _Gone
            if not 200 <= response.status < 300:
                raise RuntimeError(f"watch answered HTTP {response.status}")
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    break
                if not line:
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                if event.get("type") != "BOOKMARK":
                    self._put((event["type"], obj))
        finally:
            self._watch_response = None
            with contextlib.suppress(Exception):
                response.release_conn()
        return resource_version

    # -- the sync loop: all scheduling and starting happens on this thread ------------------

    def _sync_loop(self) -> None:
        next_tick = time.monotonic() + TICK
        while not self._stop.is_set():
            try:
                kind, payload = self._queue.get(timeout=max(0.0, next_tick - time.monotonic()))
            except queue.Empty:
                kind, payload = "", None
            if self._partitioned.is_set():
                next_tick = time.monotonic() + TICK
                continue  # deaf to the watch, schedules nothing
            try:
                if kind == "list":
                    self._resync(payload)
                elif kind == "unassume":
                    key, uid = payload
                    if self._assumed.get(key) == uid:
                        del self._assumed[key]
                elif kind == "DELETED":
                    self._on_deleted(payload)
                elif kind:
                    self._on_pod(payload)
                if time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + TICK
                    self._tick()
            except Exception:
                log.exception("handling %s failed", kind or "tick")

    def _resync(self, items: list[dict[str, Any]]) -> None:
        """A fresh list: forget and stop what vanished while the watch was away."""
        listed = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in items}
        for key, cached in list(self._cache.items()):
            if key not in listed or listed[key]["metadata"]["uid"] != cached["metadata"]["uid"]:
                self._on_deleted(cached)
        with self._lock:
            orphans = [p for k, p in self.pods.items() if k not in listed or listed[k]["metadata"]["uid"] != p.uid]
        for orphan in orphans:
            self._forget(orphan)
        for item in items:
            self._on_pod(item)

    def _tick(self) -> None:
        now = time.monotonic()
        for key, (uid, retry_at) in list(self._waiting.items()):
            pod = self._cache.get(key)
            if pod is None or pod["metadata"]["uid"] != uid:
                self._waiting.pop(key, None)
            elif now >= retry_at:
                self._start(pod)
        for key in list(self._unschedulable):
            if (self._cache.get(key, {}).get("spec") or {}).get("nodeName") or key not in self._cache:
                self._unschedulable.pop(key, None)
        pending = [pod for key, pod in self._cache.items() if key not in self._assumed and self._to_schedule(pod)]
        self.cordoned = self._cordoned()
        if pending:
            used = self._used()
            for pod in pending:
                self._schedule(pod, used)

    def _on_deleted(self, pod: dict[str, Any]) -> None:
        key, uid = _key(pod), pod["metadata"]["uid"]
        cached = self._cache.get(key)
        if cached is not None and cached["metadata"]["uid"] == uid:
            self._cache.pop(key, None)
        self._assumed.pop(key, None)
        self._requests_memo.pop(uid, None)
        self._unschedulable.pop(key, None)
        if self._waiting.get(key, ("",))[0] == uid:
            self._waiting.pop(key, None)
        with self._lock:
            running = self.pods.get(key)
        if running is not None and running.uid == uid:
            self._forget(running)

    def _forget(self, pod: RunningPod) -> None:
        """The pod object is gone (force-deleted, or vanished): kill at once, drop it."""
        for container in pod.containers:
            if container.process is not None and container.process.poll() is None:
                _signal_group(container.process, signal.SIGKILL)
        with self._lock:
            if self.pods.get(pod.key) is pod:
                del self.pods[pod.key]
        for container in pod.containers:
            if container.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    container.process.wait(timeout=5)
            with contextlib.suppress(OSError):
                container.message_file.unlink()

    def _on_pod(self, pod: dict[str, Any]) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        key, uid = _key(pod), meta["uid"]
        node = spec.get("nodeName")
        cached = self._cache.get(key)
        if cached is not None and cached["metadata"]["uid"] != uid:
            self._on_deleted(cached)  # recreated under the same name while we weren't looking
        if node and node != self.node_name:
            self._cache.pop(key, None)  # another node's: none of our business
            self._assumed.pop(key, None)
            return
        self._cache[key] = pod
        if not node and self._assumed.get(key) == uid:
            return  # an event from before our binding: it counts as ours until the binding shows or fails
        if node:
            self._assumed.pop(key, None)
            self._unschedulable.pop(key, None)
        if meta.get("deletionTimestamp"):
            if node:
                self._on_deleting(pod)
            return
        phase = status.get("phase") or "Pending"
        if not node:
            if self._to_schedule(pod) and key not in self._assumed:
                self._schedule(pod, self._used())
            return
        with self._lock:
            running = self.pods.get(key)
        if running is not None:
            if running.uid == uid:
                return
            self._forget(running)
        if phase in TERMINAL or self._waiting.get(key, ("",))[0] == uid:
            return
        if any("running" in (s.get("state") or {}) for s in status.get("containerStatuses") or []):
            self._report_lost(pod)
            return
        self._start(pod)

    def _on_deleting(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key, uid = _key(pod), meta["uid"]
        with self._lock:
            running = self.pods.get(key)
        if running is None or running.uid != uid:
            self._waiting.pop(key, None)
            self._remove(key, uid)
            return
        if running.stopping:
            return
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        self._post_event(pod, "Normal", "Killing", "Stopping container(s)")
        with running.lock:
            running.kill_at = time.monotonic() + max(0.0, float(grace))
            running.stopping = True
            for container in running.containers:
                if container.process is not None and container.terminated is None:
                    _signal_group(container.process, signal.SIGTERM)
        # the supervise loop SIGKILLs at kill_at and makes the final delete once all exited

    # -- scheduling ----------------------------------------------------------------------

    def _to_schedule(self, pod: dict[str, Any]) -> bool:
        spec = pod.get("spec") or {}
        return (
            not spec.get("nodeName")
            and not pod["metadata"].get("deletionTimestamp")
            and ((pod.get("status") or {}).get("phase") or "Pending") == "Pending"
            and (spec.get("schedulerName") or "default-scheduler") == self.scheduler_name
        )

    def _requests(self, pod: dict[str, Any]) -> dict[str, float]:
        uid = pod["metadata"]["uid"]
        memo = self._requests_memo.get(uid)
        if memo is not None:
            return memo
        total: dict[str, float] = {"pods": 1.0}
        for container in (pod.get("spec") or {}).get("containers") or []:
            resources = container.get("resources") or {}
            wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for name, value in wanted.items():
                total[name] = total.get(name, 0.0) + quantity(value)
        self._requests_memo[uid] = total
        return total

    def _used(self) -> dict[str, float]:
        used: dict[str, float] = {}
        for key, pod in self._cache.items():
            bound = (pod.get("spec") or {}).get("nodeName") == self.node_name or key in self._assumed
            if bound and (pod.get("status") or {}).get("phase") not in TERMINAL:
                for name, value in self._requests(pod).items():
                    used[name] = used.get(name, 0.0) + value
        return used

    def _cordoned(self) -> bool:
        """``kubectl cordon`` / ``drain`` set the Node's spec.unschedulable: no new pods."""
        try:
            node = self.core.read_node(self.node_name, _preload_content=False)
            return bool((json.loads(node.data).get("spec") or {}).get("unschedulable"))
        except ApiException:
            return False

    def _unfit(self, pod: dict[str, Any], used: dict[str, float]) -> str | None:
        if self.cordoned and not _tolerates_unschedulable(pod):
            return UNSCHEDULABLE_NODE
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        if any(self.node_labels.get(k) != v for k, v in selector.items()):
            return "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
        allocatable = {k: quantity(v) for k, v in self._allocatable().items()}
        short = [
            name
            for name, value in sorted(self._requests(pod).items())
            if value > allocatable.get(name, 0.0) - used.get(name, 0.0) + 1e-9
        ]
        if short:
            reasons = " ".join("1 Too many pods." if name == "pods" else f"1 Insufficient {name}." for name in short)
            return f"0/1 nodes are available: {reasons}"
        return None

    def _schedule(self, pod: dict[str, Any], used: dict[str, float]) -> None:
        meta = pod["metadata"]
        key = _key(pod)
        message = self._unfit(pod, used)
        if message is not None:
            if self._unschedulable.get(key) != message:
                condition = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": _now(),
                }
                self._patch_status(key, {"conditions": [condition]})
                self._post_event(pod, "Warning", "FailedScheduling", message, component="default-scheduler")
            self._unschedulable[key] = message
            return
        self._unschedulable.pop(key, None)
        self._assumed[key] = meta["uid"]  # counts as used until the watch shows the binding (or it fails)
        for name, value in self._requests(pod).items():
            used[name] = used.get(name, 0.0) + value
        self._async(self._bind, key, meta["uid"])

    def _bind(self, key: tuple[str, str], uid: str) -> None:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": key[1], "namespace": key[0], "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name},
        }
        try:
            self.core.create_namespaced_pod_binding(key[1], key[0], binding, _preload_content=False)
        except Exception as error:
            self._put(("unassume", (key, uid)))  # gone, bound elsewhere, or failed: schedule it again
            if not (isinstance(error, ApiException) and error.status in (404, 409)):
                raise

    # -- running ---------------------------------------------------------------------------

    def _lookup(self, kind: str, namespace: str, name: str, optional: bool) -> dict[str, str] | None:
        try:
            if kind == "Secret":
                data = self.core.read_namespaced_secret(name, namespace).data or {}
                return {k: base64.b64decode(v).decode() for k, v in data.items()}
            return dict(self.core.read_namespaced_config_map(name, namespace).data or {})
        except ApiException as error:
            if error.status != 404:
                raise
            if optional:
                return None
            raise ConfigError(f'{kind.lower()} "{name}" not found') from None

    def _key_ref(self, kind: str, namespace: str, ref: dict[str, Any]) -> str | None:
        optional = bool(ref.get("optional"))
        data = self._lookup(kind, namespace, ref["name"], optional)
        if data is None:
            return None
        if ref["key"] not in data:
            if optional:
                return None
            raise ConfigError(f"couldn't find key {ref['key']} in {kind} {namespace}/{ref['name']}")
        return data[ref["key"]]

    def _field(self, pod: dict[str, Any], path: str) -> str:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
        if match:
            return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
        fields = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "metadata.uid": meta["uid"],
            "metadata.labels": "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get("labels") or {}).items())),
            "metadata.annotations": "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get("annotations") or {}).items())),
            "spec.nodeName": self.node_name,
            "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
            "status.hostIP": "127.0.0.1",
            "status.hostIPs": "127.0.0.1",
            "status.podIP": "127.0.0.1",
            "status.podIPs": "127.0.0.1",
        }
        if path not in fields:
            raise ConfigError(f"unsupported fieldRef {path!r} (test kubelet)")
        return fields[path]

    def _env(self, pod: dict[str, Any], container: dict[str, Any], message_file: Path) -> dict[str, str]:
        namespace = pod["metadata"]["namespace"]
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "TZ")}
        env["HOSTNAME"] = pod["metadata"]["name"]
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix", "")
            for kind, ref_name in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                if ref_name in source:
                    ref = source[ref_name]
                    data = self._lookup(kind, namespace, ref["name"], bool(ref.get("optional")))
                    env.update({prefix + k: v for k, v in (data or {}).items()})
        message_path = container.get("terminationMessagePath") or "/dev/termination-log"
        for var in container.get("env") or []:
            source = var.get("valueFrom")
            value: str | None
            if source is None:
                value = _expand(str(var.get("value", "")), env)
            elif "secretKeyRef" in source:
                value = self._key_ref("Secret", namespace, source["secretKeyRef"])
            elif "configMapKeyRef" in source:
                value = self._key_ref("ConfigMap", namespace, source["configMapKeyRef"])
            elif "fieldRef" in source:
                value = self._field(pod, source["fieldRef"]["fieldPath"])
            else:
                raise ConfigError(f"unsupported valueFrom {sorted(source)} for {var['name']} (test kubelet)")
            if value is None:  # optional and absent
                continue
            env[var["name"]] = str(message_file) if value == message_path else value
        return env

    def _shift_ports(self, spec: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
        """With ``port_offset``, a variable naming a declared containerPort names the shifted one."""
        if not self.port_offset:
            return env
        declared = {str(p["containerPort"]) for p in spec.get("ports") or [] if p.get("containerPort")}
        return {k: str(int(v) + self.port_offset) if v in declared else v for k, v in env.items()}

    def _sleeper(self, pod: dict[str, Any]) -> bool:
        annotations = pod["metadata"].get("annotations") or {}
        return self.sleeper or str(annotations.get(SLEEPER_ANNOTATION, "")).lower() == "true"

    def _start(self, pod: dict[str, Any]) -> None:
        key, uid = _key(pod), pod["metadata"]["uid"]
        specs = pod["spec"]["containers"]
        if self.simulate:
            now = _now()
            stand_ins = [
                Container(c["name"], c.get("image", ""), None, Path(os.devnull), Path(os.devnull), now, ready=True)
                for c in specs
            ]
            running = RunningPod(key[0], key[1], uid, stand_ins, now, simulated=True)
            with self._lock:
                self.pods[key] = running
            self._async(self._report, running)
            return
        sleeper = self._sleeper(pod)
        try:
            plans = []
            for index, spec in enumerate(specs):
                message_file = self.work_dir_path / f"{key[0]}_{key[1]}_{spec['name']}.termination"
                env = self._shift_ports(spec, self._env(pod, spec, message_file))
                argv = [_expand(a, env) for a in list(spec.get("command") or []) + list(spec.get("args") or [])]
                if sleeper:
                    argv = ["sleep", "infinity"]
                if not argv:
                    raise ConfigError(f"container {spec['name']} has no command (the test kubelet ignores images)")
                log_file = self.log_path(key[0], key[1], None if index == 0 else spec["name"])
                plans.append((spec, argv, env, message_file, log_file))
        except (ConfigError, ApiException) as error:
            message = str(error) if isinstance(error, ConfigError) else f"{error.status} {error.reason}"
            self._waiting[key] = (uid, time.monotonic() + 2.0)
            self._patch_status(key, _waiting_status(specs, "CreateContainerConfigError", message))
            self._post_event(pod, "Warning", "Failed", f"Error: {message}")
            return
        self._waiting.pop(key, None)
        started = _now()
        containers: list[Container] = []
        policy = str(pod["spec"].get("restartPolicy") or "Always")
        running = RunningPod(key[0], key[1], uid, containers, started, restart_policy=policy)
        for spec, argv, env, message_file, log_file in plans:
            container = Container(
                name=spec["name"],
                image=spec.get("image", ""),
                process=None,
                message_file=message_file,
                log_file=log_file,
                started_at=started,
                fallback_to_logs=spec.get("terminationMessagePolicy") == "FallbackToLogsOnError",
                ports={
                    p["name"]: int(p["containerPort"]) + self.port_offset
                    for p in spec.get("ports") or []
                    if p.get("name")
                },
                argv=argv,
                env=env,
            )
            limit = ((spec.get("resources") or {}).get("limits") or {}).get("memory")
            if limit is not None and not sleeper:
                container.memory_limit = quantity(limit)
            if not sleeper:
                container.readiness = (spec.get("readinessProbe") or {}) or None
                container.liveness = (spec.get("livenessProbe") or {}) or None
            self._spawn(container)
            containers.append(container)
        with self._lock:
            self.pods[key] = running
        self._async(self._report, running)

    def _spawn(self, container: Container) -> None:
        """Start (or restart) a container's process in a process group of its own."""
        now = time.monotonic()
        container.started_at = _now()
        container.terminated, container.process = None, None
        container.ready = container.readiness is None
        container.readiness_failures = container.liveness_failures = 0
        container.next_readiness, container.kill_at = now, None
        if container.liveness is not None:
            container.next_liveness = now + float(container.liveness.get("initialDelaySeconds", 0))
        container.message_file.write_text("")
        argv = container.argv
        if self._setpriv:  # the process dies with the thread that started it, even if we are SIGKILLed
            argv = [self._setpriv, "--pdeathsig", "KILL", "--", *argv]
        try:
            with container.log_file.open("ab") as out:
                container.process = subprocess.Popen(
                    argv,
                    env=container.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=self.work_dir,
                )
        except OSError as error:  # what a runtime reports when the entrypoint can't start
            container.ready = False
            container.terminated = {
                "exitCode": 128,
                "reason": "StartError",
                "message": str(error),
                "startedAt": container.started_at,
                "finishedAt": _now(),
            }

    @property
    def work_dir_path(self) -> Path:
        assert self.work_dir is not None
        return self.work_dir

    def _report_lost(self, pod: dict[str, Any]) -> None:
        """Bound here and Running, but no process of ours: a previous kubelet's, lost with it."""
        key = _key(pod)
        statuses = []
        for spec in pod["spec"]["containers"]:
            terminated = {
                "exitCode": 137,
                "reason": "ContainerStatusUnknown",
                "message": "The container could not be located when the pod was terminated",
                "startedAt": None,
                "finishedAt": _now(),
            }
            statuses.append(_container_status(spec["name"], spec.get("image", ""), {"terminated": terminated}))
        self._patch_status(key, {"phase": "Failed", "containerStatuses": statuses})

    def _report(self, pod: RunningPod, final: bool = False) -> None:
        """Patch the pod's status from what its processes do (only when it changed).
        ``final``: the pod was deleted and its containers have exited: as a real kubelet
        does, report how they ended (phase Succeeded/Failed) before the final delete."""
        with pod.lock:
            if pod.stopping and not final:
                return  # being deleted: its exit is reported once every container is gone
            finished, ready = pod.finished, pod.ready
            if pod.last_status is None or pod.last_status.get("_ready") != ready:
                pod.ready_since = _now()
            if finished:
                phase = (
                    "Succeeded"
                    if all(c.terminated and c.terminated["exitCode"] == 0 for c in pod.containers)
                    else "Failed"
                )
            else:
                phase = "Running"
            flag = "True" if ready else "False"
            reason = {"reason": "PodCompleted"} if finished else {}
            status: dict[str, Any] = {
                "phase": phase,
                "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}],
                "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                "startTime": pod.started_at,
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": pod.started_at},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": pod.started_at},
                    {"type": "ContainersReady", "status": flag, "lastTransitionTime": pod.ready_since, **reason},
                    {"type": "Ready", "status": flag, "lastTransitionTime": pod.ready_since, **reason},
                ],
                "containerStatuses": [_status_of(c, pod.name) for c in pod.containers],
            }
            if status == {k: v for k, v in (pod.last_status or {}).items() if k != "_ready"}:
                return
            self._patch_status(pod.key, status)
            pod.last_status = {**status, "_ready": ready}

    # -- supervising: exits, probes, deletion deadlines ----------------------------------------

    def _supervise_loop(self) -> None:
        next_memory_check = 0.0
        while not self._stop.wait(SUPERVISE_PERIOD):
            with self._lock:
                pods = list(self.pods.values())
            if time.monotonic() >= next_memory_check:
                next_memory_check = time.monotonic() + MEMORY_PERIOD
                self._enforce_memory_limits(pods)
            for pod in pods:
                try:
                    self._supervise(pod)
                except Exception:
                    log.exception("supervising %s/%s failed", pod.namespace, pod.name)

    def _supervise(self, pod: RunningPod) -> None:
        now = time.monotonic()
        changed = False
        for container in pod.containers:
            if container.terminated is None and container.process is not None and container.process.poll() is not None:
                container.terminated = self._terminated(container)
                container.ready = False
                changed = True
                with self._lock:
                    self._exits[(pod.namespace, pod.name, pod.uid, container.name)] = container.terminated
                    while len(self._exits) > 1000:
                        self._exits.popitem(last=False)
                _signal_group(container.process, signal.SIGKILL)  # nothing of the group outlives its leader
            if container.terminated is not None and not pod.stopping and self._restarts(pod, container.terminated):
                # CrashLoopBackOff as the kubelet does it: 10 s (crash_backoff), doubling, at most 300 s.
                container.last_terminated, container.terminated = container.terminated, None
                container.process = None
                container.backoff = min(max(container.backoff * 2, self.crash_backoff), 300.0)
                container.restart_at = now + container.backoff
                changed = True
            elif container.restart_at is not None and now >= container.restart_at and not pod.stopping:
                container.restart_at = None
                container.restart_count += 1
                self._spawn(container)
                changed = True
        if pod.stopping:
            if pod.removed:
                return
            alive = [c for c in pod.containers if c.terminated is None and c.process is not None]
            if alive and pod.kill_at is not None and now >= pod.kill_at and not pod.killed:
                pod.killed = True
                for container in alive:
                    assert container.process is not None
                    _signal_group(container.process, signal.SIGKILL)
            if not alive:
                pod.removed = True
                self._async(self._report_and_remove, pod)
            return
        if pod.finished:
            if changed:
                self._report(pod)
            return
        for container in pod.containers:
            if container.terminated is not None or container.process is None:
                continue
            if container.kill_at is not None:
                if now >= container.kill_at and container.process is not None:
                    _signal_group(container.process, signal.SIGKILL)
                continue
            if container.readiness is not None and now >= container.next_readiness:
                container.next_readiness = now + READINESS_PERIOD
                ok = self._probe(container, container.readiness)
                container.readiness_failures = 0 if ok else container.readiness_failures + 1
                threshold = int(container.readiness.get("failureThreshold", 3))
                if ok and not container.ready:
                    container.ready, changed = True, True
                elif not ok and container.ready and container.readiness_failures >= threshold:
                    container.ready, changed = False, True
            if container.liveness is not None and now >= container.next_liveness:
                container.next_liveness = now + float(container.liveness.get("periodSeconds", 10))
                if self._probe(container, container.liveness):
                    container.liveness_failures = 0
                else:
                    container.liveness_failures += 1
                    if container.liveness_failures >= int(container.liveness.get("failureThreshold", 3)):
                        self._liveness_kill(pod, container)
        if changed:
            self._report(pod)

    def _enforce_memory_limits(self, pods: list[RunningPod]) -> None:
        """A container whose processes hold more than its memory limit is SIGKILLed and
        reported ``OOMKilled`` (137), as the kernel's OOM killer in the container's cgroup
        and the kubelet do on a real node (resident memory stands in for the cgroup's)."""
        limited = [
            c
            for pod in pods
            if not pod.stopping
            for c in pod.containers
            if c.memory_limit is not None and c.process is not None and c.terminated is None
        ]
        if not limited:
            return
        rss = _resident_by_group()
        for container in limited:
            assert container.process is not None and container.memory_limit is not None
            if rss.get(container.process.pid, 0) > container.memory_limit:
                container.oom_killed = True
                _signal_group(container.process, signal.SIGKILL)

    @staticmethod
    def _restarts(pod: RunningPod, terminated: dict[str, Any]) -> bool:
        return pod.restart_policy == "Always" or (pod.restart_policy == "OnFailure" and terminated["exitCode"] != 0)

    def _liveness_kill(self, pod: RunningPod, container: Container) -> None:
        message = f"Container {container.name} failed liveness probe, will be killed"
        cached = self._cache.get(pod.key)
        if cached is not None:
            self._post_event(cached, "Warning", "Unhealthy", message)
        grace = float(((cached or {}).get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        container.kill_at = time.monotonic() + grace
        if container.process is not None:
            _signal_group(container.process, signal.SIGTERM)

    def _probe(self, container: Container, probe: dict[str, Any]) -> bool:
        action = probe.get("httpGet")
        if action is None:
            return True  # exec/tcpSocket/grpc probes: not run here, counted as passing
        port = action.get("port")
        if isinstance(port, str) and not port.isdigit():
            port = container.ports.get(port)
            if port is None:
                return False
        else:
            port = int(port) + self.port_offset
        scheme = str(action.get("scheme", "HTTP")).lower()
        url = f"{scheme}://127.0.0.1:{port}{action.get('path', '/')}"
        headers = {h["name"]: h["value"] for h in action.get("httpHeaders") or []}
        timeout = min(float(probe.get("timeoutSeconds", 1)), 1.0)
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
                return 200 <= int(response.status) < 400
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _terminated(self, container: Container) -> dict[str, Any]:
        assert container.process is not None
        code = container.process.returncode
        exit_code = 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a runtime reports
        try:
            message = container.message_file.read_text(errors="replace")[-MAX_MESSAGE:]
        except OSError:
            message = ""
        if not message.strip() and exit_code != 0 and container.fallback_to_logs:
            try:
                with container.log_file.open("rb") as handle:
                    handle.seek(max(0, container.log_file.stat().st_size - FALLBACK_BYTES))
                    tail = handle.read().decode(errors="replace")
                message = "\n".join(tail.splitlines()[-FALLBACK_LINES:])
            except OSError:
                message = ""
        reason = "Completed" if exit_code == 0 else "Error"
        if container.oom_killed:
            reason, exit_code = "OOMKilled", 137
        terminated: dict[str, Any] = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": container.started_at,
            "finishedAt": _now(),
            "containerID": f"local://{container.process.pid}",
        }
        if code < 0:
            terminated["signal"] = -code
        if message.strip():
            terminated["message"] = message
        return terminated

    # -- API writes ----------------------------------------------------------------------------

    def _async(self, function: Any, *args: Any) -> None:
        """Run an API write on the writer pool (logged if it fails)."""

        def run() -> None:
            try:
                function(*args)
            except Exception:
                log.exception("%s failed", getattr(function, "__name__", function))

        if self._writer is None or self._stop.is_set() or self._partitioned.is_set():
            return
        with contextlib.suppress(RuntimeError):  # shut down meanwhile
            self._writer.submit(run)

    def _report_and_remove(self, pod: RunningPod) -> None:
        if not pod.simulated:
            self._report(pod, final=True)
        self._remove(pod.key, pod.uid)

    def _remove(self, key: tuple[str, str], uid: str) -> None:
        """The kubelet's final delete: the containers are gone, the object may go."""
        try:
            self.core.delete_namespaced_pod(
                key[1],
                key[0],
                body=client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)),
                _preload_content=False,
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def _patch_status(self, key: tuple[str, str], status: dict[str, Any]) -> None:
        try:
            self.core.patch_namespaced_pod_status(key[1], key[0], {"status": status}, _preload_content=False)
        except ApiException as error:
            if error.status != 404:  # deleted meanwhile
                raise

    def _post_event(
        self, pod: dict[str, Any], kind: str, reason: str, message: str, component: str = "kubelet"
    ) -> None:
        if not self.events:
            return
        meta = pod["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": component, "host": self.node_name},
            "reportingComponent": component,
            "reportingInstance": self.node_name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(meta["namespace"], event, _preload_content=False)
        except ApiException as error:
            log.debug("event %s for %s/%s not recorded: %s", reason, meta["namespace"], meta["name"], error.status)


def _key(pod: dict[str, Any]) -> tuple[str, str]:
    return (pod["metadata"]["namespace"], pod["metadata"]["name"])


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined names are replaced, ``$$`` escapes, the rest stays."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REFERENCE.sub(replace, text)


def _container_status(
    name: str, image: str, state: dict[str, Any], ready: bool = False, container_id: str = ""
) -> dict[str, Any]:
    status = {
        "name": name,
        "image": image or "local",
        "imageID": "",
        "ready": ready,
        "started": "running" in state,
        "restartCount": 0,
        "state": state,
    }
    if container_id:
        status["containerID"] = container_id
    return status


def _status_of(container: Container, pod_name: str) -> dict[str, Any]:
    if container.terminated is not None:
        state: dict[str, Any] = {"terminated": container.terminated}
    elif container.restart_at is not None:
        message = f"back-off {container.backoff:.0f}s restarting failed container={container.name} pod={pod_name}"
        state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
    else:
        state = {"running": {"startedAt": container.started_at}}
    status = _container_status(
        container.name,
        container.image,
        state,
        ready=container.ready and "running" in state,
        container_id=f"local://{container.pid}" if container.pid and "waiting" not in state else "",
    )
    status["restartCount"] = container.restart_count
    if container.last_terminated is not None:
        status["lastState"] = {"terminated": container.last_terminated}
    return status


def _waiting_status(specs: list[dict[str, Any]], reason: str, message: str) -> dict[str, Any]:
    return {
        "containerStatuses": [
            _container_status(s["name"], s.get("image", ""), {"waiting": {"reason": reason, "message": message}})
            for s in specs
        ]
    }


def _tolerates_unschedulable(pod: dict[str, Any]) -> bool:
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        if toleration.get("key") == "node.kubernetes.io/unschedulable" or (
            not toleration.get("key") and toleration.get("operator") == "Exists"
        ):
            return True
    return False


def _resident_by_group() -> dict[int, int]:
    """Resident bytes of every process group on this host (pgid -> bytes), from /proc."""
    page = os.sysconf("SC_PAGE_SIZE")
    totals: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        # after "pid (comm)": state ppid pgrp ... rss is field 24 of stat(5), index 21 here
        pgid, pages = int(fields[2]), int(fields[21])
        totals[pgid] = totals.get(pgid, 0) + pages * page
    return totals


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a test kubelet: one Node whose pods are local processes")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="default: $KUBECONFIG")
    parser.add_argument("--node-name", default="rolloutfleet-test-node")
    parser.add_argument("--cpu", default="64")
    parser.add_argument("--memory", default="256Gi")
    parser.add_argument("--max-pods", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=0, help="the node's nvidia.com/gpu count")
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="a node label (repeat)")
    parser.add_argument("--scheduler-name", default="default-scheduler", help="schedule only pods naming this")
    parser.add_argument("--port-offset", type=int, default=0, help="shift declared container ports (a second node)")
    parser.add_argument("--work-dir", type=Path, help="logs and termination messages (default: a temp dir)")
    parser.add_argument("--sleeper", action="store_true", help="run `sleep infinity` for every container")
    parser.add_argument("--simulate", action="store_true", help="run no processes: pods go Running and Ready")
    parser.add_argument("--pid-file", type=Path, help="write this process's pid here")
    parser.add_argument("--exit-when-missing", type=Path, help="stop once this path no longer exists")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    if not args.kubeconfig:
        parser.error("--kubeconfig (or $KUBECONFIG) is required")
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    labels = dict(item.split("=", 1) for item in args.label)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    kubelet = LocalKubelet(
        args.kubeconfig,
        node_name=args.node_name,
        cpu=args.cpu,
        memory=args.memory,
        max_pods=args.max_pods,
        gpus=args.gpus,
        simulate=args.simulate,
        sleeper=args.sleeper,
        work_dir=args.work_dir,
        labels=labels,
        scheduler_name=args.scheduler_name,
        port_offset=args.port_offset,
    )
    if args.pid_file:
        args.pid_file.write_text(f"{os.getpid()}\n")
    try:
        kubelet.start()
        while not stop.wait(1.0):
            if args.exit_when_missing is not None and not args.exit_when_missing.exists():
                log.info("%s is gone: stopping", args.exit_when_missing)
                break
    finally:
        kubelet.stop()
        log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
