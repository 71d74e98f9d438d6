"""What the node tier's tests use: kubectl, helm and ctr against the real node's cluster."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rolloutfleet import BatchConsumer

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


def chart_redis(node: Node, namespace: str, release: str = "rolloutfleet") -> tuple[str, str]:
    """The URL of a chart release's TLS Redis as the host reaches it (the Service's address,
    the chart's CA; that address is not among the certificate's names, so the chain is
    verified, not the name) and its password."""
    service = node.get(namespace, "service", f"{release}-redis")
    password = base64.b64decode(node.get(namespace, "secret", f"{release}-redis")["data"]["password"]).decode()
    ca = base64.b64decode(node.get(namespace, "secret", f"{release}-redis-ca")["data"]["ca.crt"])
    ca_file = Path(tempfile.gettempdir()) / f"rolloutfleet-node-{namespace}-redis-ca.crt"
    ca_file.write_bytes(ca)
    return f"rediss://{service['spec']['clusterIP']}:6379/0?ssl_ca_certs={ca_file}&ssl_check_hostname=false", password


class Seen:
    """Every batch read, by producer (one worker process): its sequence numbers."""

    def __init__(self) -> None:
        self.seqs: dict[tuple[int, str], list[int]] = defaultdict(list)

    def read(self, reader: BatchConsumer, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            messages = reader.read(count=64, timeout=0.5)
            for message in messages:
                self.seqs[(message.metadata.worker_index, message.metadata.producer)].append(message.metadata.seq)
            reader.ack(messages)

    def producers(self, index: int) -> list[str]:
        return [producer for (i, producer) in self.seqs if i == index]
