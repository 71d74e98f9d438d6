"""A stand-in for the Kubernetes API the operator calls, for tests without a server.

The kmock tests (test_handlers.py) run the whole operator against an emulated server;
these fixtures let the modules below the kopf layer be tested one by one, with every
call the operator makes recorded in order."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from rolloutfleet_operator.loop.api_calls import Api


def _api_error(status: int, message: str | None = None, reason: str = "") -> ApiException:
    """An ApiException as the client raises it, with a Kubernetes Status body when ``message``."""
    body = json.dumps({"kind": "Status", "message": message}) if message is not None else None
    return ApiException(status=status, reason=reason, body=body)


class FakeKube:
    """The methods of ``CoreV1Api``, ``CustomObjectsApi`` and ``PolicyV1Api`` the operator uses.

    ``calls`` lists every call in order (both clients share it: a status patch before a
    delete shows as such); :meth:`fail` makes a method raise until :meth:`recover`;
    ``delay_s`` keeps each call busy, to see how many run at once (``most_in_flight``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.pods: dict[str, dict[str, Any]] = {}
        self.pdbs: dict[str, dict[str, Any]] = {}
        self.services: dict[str, dict[str, Any]] = {}
        self.network_policies: dict[str, dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.failing: dict[str, ApiException] = {}
        self.delay_s = 0.0
        self.most_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()

    def api(self, slots: int = 16) -> Api:
        return Api(core=self, custom=self, policy=self, networking=self, slots=asyncio.Semaphore(slots))  # type: ignore[arg-type]

    def fail(self, method: str, status: int, message: str | None = None, reason: str = "") -> None:
        """``method`` raises as the server answering ``status`` would (a Status body with ``message``)."""
        self.failing[method] = _api_error(status, message, reason)

    def recover(self, method: str) -> None:
        self.failing.pop(method, None)

    def named(self, method: str) -> list[dict[str, Any]]:
        return [args for name, args in self.calls if name == method]

    def _call(self, method: str, **args: Any) -> None:
        with self._lock:
            self.calls.append((method, args))
            self._in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self._in_flight)
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            if method in self.failing:
                raise self.failing[method]
        finally:
            with self._lock:
                self._in_flight -= 1

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        self._call("create_namespaced_pod", namespace=namespace, body=body, **kw)
        name = body["metadata"]["name"]
        serial = len(self.calls)  # as the API server's: a uid, and a resourceVersion that only grows
        created = {
            **body,
            "metadata": {**body["metadata"], "uid": f"uid-{name}-{serial}", "resourceVersion": str(serial)},
        }
        self.pods[name] = created
        return SimpleNamespace(data=json.dumps(created).encode())

    def delete_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> Any:
        self._call("delete_namespaced_pod", name=name, namespace=namespace, **kw)
        self.pods.pop(name, None)
        return SimpleNamespace(data=b"{}")

    def create_namespaced_pod_disruption_budget(self, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        self._call("create_pdb", namespace=namespace, body=body)
        name = body["metadata"]["name"]
        if name in self.pdbs:
            raise _api_error(409, f'poddisruptionbudgets.policy "{name}" already exists', "AlreadyExists")
        self.pdbs[name] = body
        return SimpleNamespace(data=json.dumps(body).encode())

    def patch_namespaced_pod_disruption_budget(self, name: str, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        self._call("patch_pdb", name=name, namespace=namespace, body=body)
        if name not in self.pdbs:
            raise _api_error(404, f'poddisruptionbudgets.policy "{name}" not found')
        self.pdbs[name] = {**self.pdbs[name], "spec": {**self.pdbs[name]["spec"], **body["spec"]}}
        return SimpleNamespace(data=json.dumps(self.pdbs[name]).encode())

    def create_namespaced_service(self, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        self._call("create_service", namespace=namespace, body=body)
        name = body["metadata"]["name"]
        if name in self.services:
            raise _api_error(409, f'services "{name}" already exists', "AlreadyExists")
        self.services[name] = body
        return SimpleNamespace(data=json.dumps(body).encode())

    def patch_namespaced_service(self, name: str, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        self._call("patch_service", name=name, namespace=namespace, body=body)
        self.services[name] = {**self.services[name], "spec": {**self.services[name]["spec"], **body["spec"]}}
        return SimpleNamespace(data=json.dumps(self.services[name]).encode())

    def create_namespaced_network_policy(self, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        self._call("create_network_policy", namespace=namespace, body=body)
        name = body["metadata"]["name"]
        if name in self.network_policies:
            raise _api_error(409, f'networkpolicies.networking.k8s.io "{name}" already exists', "AlreadyExists")
        self.network_policies[name] = body
        return SimpleNamespace(data=json.dumps(body).encode())

    def patch_namespaced_network_policy(self, name: str, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        self._call("patch_network_policy", name=name, namespace=namespace, body=body)
        self.network_policies[name] = {**self.network_policies[name], "spec": body["spec"]}
        return SimpleNamespace(data=json.dumps(self.network_policies[name]).encode())

    def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        self._call("read_namespaced_secret", name=name, namespace=namespace)
        if (namespace, name) not in self.secrets:
            raise _api_error(404, f'secrets "{name}" not found')
        data = {k: base64.b64encode(v.encode()).decode() for k, v in self.secrets[(namespace, name)].items()}
        return SimpleNamespace(data=data)

    def patch_namespaced_custom_object_status(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: dict[str, Any]
    ) -> Any:
        self._call("patch_status", resource=(group, version, plural), namespace=namespace, name=name, body=body)
        return body


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def posted(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The Events the operator posts (kopf.event needs a running operator to post them)."""
    events: list[dict[str, Any]] = []

    def record(objs: Any, *, type: str, reason: str, message: str = "", **_: Any) -> None:
        events.append({"object": objs, "type": type, "reason": reason, "message": message})

    monkeypatch.setattr(kopf, "event", record)
    return events
