"""A minimal simulated kubelet for the operator bench: one watch, one status patch per pod.

It watches one namespace's pods (raw watch events, no client models), and for each new
pod (by uid) not yet Running sends a single ``pods/status`` patch (phase Running, Ready,
the container running) from a bounded pool of :data:`WRITERS` threads. It binds nothing:
an unscheduled pod is deleted at once by the API server (no grace period, no final
delete to send), so deleting costs the simulated kubelet nothing. The same watch keeps
the counts the bench waits on (pods present, Running, left of an older set), so the bench
never lists pods. Not a kubelet: tests/cluster/kubelet.py is the faithful one.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import threading
import time
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

WRITERS = 8  # concurrent status patches: bounded, so the bench's load on the API server is too


def running_patch(pod: dict[str, Any], now: str) -> dict[str, Any]:
    """The one status patch that makes ``pod`` Running and Ready."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return {
        "status": {
            "phase": "Running",
            "startTime": now,
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            ],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
                for c in containers
            ],
        }
    }


class SimKubelet:
    """Watch ``namespace``'s pods; make each new one Running; count what the watch shows."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.pods: dict[str, tuple[str, bool]] = {}  # name -> (uid, running)
        # Kept as the events come (the bench's waits read them on every event: no O(n) scans).
        self.running = 0  # pods Running
        self.old: set[str] = set()  # uids present at :meth:`mark_old`
        self.old_left = 0  # of those, still present
        self.low_water = 0  # fewest Running since :meth:`mark_old`
        self.patched: set[str] = set()  # uids sent a patch
        self.patches = 0
        # Patches the API server refused (a pod deleted or replaced meanwhile): HTTP code -> count,
        # and the first answer body of each code, for the bench to show.
        self.refused: dict[int, int] = {}
        self.refusal_bodies: dict[int, str] = {}
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._response: Any = None
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="sim-kubelet")
        self._thread = threading.Thread(target=self._watch_loop, name="sim-kubelet-watch", daemon=True)
        self.error: str = ""

    def __enter__(self) -> SimKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            if self._response is not None:
                self._response.shutdown()
        self._thread.join(timeout=10)
        self._pool.shutdown(wait=True, cancel_futures=True)

    # -- what the bench waits on -------------------------------------------------

    def count(self) -> int:
        return len(self.pods)

    def mark_old(self) -> None:
        """Remember the pods present now (a roll is done when none of them is left)."""
        with self.changed:
            self.old = {uid for uid, _ in self.pods.values()}
            self.old_left, self.low_water = len(self.old), self.running

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        """Block (on watch events, no polling) until ``predicate()`` holds; False on timeout."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 1.0))
        return True

    # -- the watch -----------------------------------------------------------------

    def _watch_loop(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                version = self._watch_once(version)
            except ApiException as error:
                if error.status == 410:
                    version = ""  # expired: start again from a fresh list
                elif not self._stop.is_set():
                    time.sleep(0.5)
            except Exception as error:  # noqa: BLE001 - a dropped stream is resumed
                if self._stop.is_set():
                    return
                self.error = f"watch dropped, resumed: {error}"  # for diagnostics only
                time.sleep(0.5)

    def _watch_once(self, version: str) -> str:
        self._response = self.core.list_namespaced_pod(
            self.namespace,
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=version or None,
            timeout_seconds=300,
            _preload_content=False,
        )
        for line in iter_resp_lines(self._response):
            event = json.loads(line)
            if event["type"] == "ERROR":
                if (event.get("object") or {}).get("code") == 410:
                    return ""
                continue
            pod = event["object"]
            version = pod["metadata"].get("resourceVersion", version)
            if event["type"] != "BOOKMARK":
                self._on_event(event["type"], pod)
        return version

    def _on_event(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        name, uid = meta["name"], meta["uid"]
        running = (pod.get("status") or {}).get("phase") == "Running"
        with self.changed:
            before = self.pods.pop(name, None)
            if before is not None:
                self.running -= before[1]
                self.old_left -= before[0] in self.old
            if kind != "DELETED":
                self.pods[name] = (uid, running)
                self.running += running
                self.old_left += uid in self.old
            self.low_water = min(self.low_water, self.running)
            self.changed.notify_all()
        if kind != "DELETED" and not running and uid not in self.patched and not meta.get("deletionTimestamp"):
            self.patched.add(uid)
            self._pool.submit(self._patch, name, pod)

    def _patch(self, name: str, pod: dict[str, Any]) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            self.core.patch_namespaced_pod_status(name, self.namespace, running_patch(pod, now), _preload_content=False)
            self.patches += 1
        except ApiException as error:
            if error.status not in (404, 409, 422):
                raise
            self.refused[error.status] = self.refused.get(error.status, 0) + 1
            self.refusal_bodies.setdefault(error.status, str(error.body or error.reason)[:500])
