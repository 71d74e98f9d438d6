"""What the node tier's tests use: kubectl, helm and ctr against the real node's cluster."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def chart_app_version() -> str:
    """The chart's appVersion: the tag of the images `make images` built for it."""
    for line in (REPO / "charts" / "rolloutfleet" / "Chart.yaml").read_text().splitlines():
        if line.startswith("appVersion:"):
            return line.split(":", 1)[1].strip().strip('"')
    raise AssertionError("no appVersion in Chart.yaml")


@dataclass
class Node:
    """The real node's cluster: kubectl and helm as a user runs them, from the repo root."""

    state: Path
    facts: dict[str, str]

    @property
    def kubeconfig(self) -> str:
        return str(self.state / "kubeconfig")

    def run(self, tool: str, *args: str, check: bool = True, timeout: float = 120, input: str | None = None) -> str:
        binary = self.facts["KUBECTL" if tool == "kubectl" else "HELM"]
        result = subprocess.run(
            [binary, *args],
            cwd=REPO,
            env={**os.environ, "KUBECONFIG": self.kubeconfig},
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result.stdout if check else result.stdout + result.stderr

    def kubectl(self, *args: str, **kw: Any) -> str:
        return self.run("kubectl", *args, **kw)

    def helm(self, *args: str, **kw: Any) -> str:
        return self.run("helm", *args, **kw)

    def get(self, namespace: str, *what: str) -> Any:
        out = self.kubectl("-n", namespace, "get", *what, "-o", "json", check=False)
        try:
            return json.loads(out)
        except json.JSONDecodeError:
            return None

    def ctr(self, *args: str) -> str:
        socket = self.facts["NODE_CONTAINERD_SOCKET"]
        return subprocess.run(
            ["ctr", "--address", socket, "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout

    def diagnostics(self, namespace: str) -> str:
        parts = [
            self.kubectl("-n", namespace, "get", "pods,rj,deploy,sts", "-o", "wide", check=False),
            self.kubectl("-n", namespace, "get", "events", "--sort-by=.lastTimestamp", check=False)[-3000:],
        ]
        kubelet_log = self.state / "node" / "logs" / "kubelet.log"
        if kubelet_log.exists():
            parts.append("--- kubelet log (tail) ---\n" + "\n".join(kubelet_log.read_text().splitlines()[-20:]))
        return "\n".join(parts)


def kernel_oom_kills(pod_uids: set[str]) -> list[str]:
    """The kernel's own record of memory-cgroup OOM kills in these pods (``dmesg``, as root):
    each ``oom-kill:constraint=CONSTRAINT_MEMCG,...,task_memcg=.../pod<uid>/<container>`` line."""
    log = subprocess.run(["dmesg"], capture_output=True, text=True, check=True, timeout=30).stdout
    return [
        line
        for line in log.splitlines()
        if "oom-kill:constraint=CONSTRAINT_MEMCG" in line and any(f"/pod{uid}/" in line for uid in pod_uids)
    ]


def wait_for(condition: Callable[[], Any], timeout: float, describe: Callable[[], str] = lambda: "") -> Any:
    """Poll ``condition`` until truthy and return it; on timeout fail with ``describe()``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:.0f} s. {describe()}")
        time.sleep(1)
