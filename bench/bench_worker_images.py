"""The slim and the full worker image on the real node: size, containerd import, first start.

For each image (``worker:<version>-slim``, then ``worker:<version>``), on a node of
``hack/node/up.sh`` (``ROLLOUTFLEET_NODE_STATE`` names its state directory):

* **size** — unpacked (``podman image inspect``) and as an OCI archive of compressed layers
  (``hack/images/export.sh``: about what a registry pull downloads);
* **import** — the image removed from containerd (``ctr images rm --sync``: content and
  snapshots collected), then ``ctr images import`` of the archive timed: writing and unpacking
  every layer, what a node does after downloading them;
* **first start** — right after, the chart's CartPole example (1 worker) with ``spec.image``
  set to it: ``kubectl apply`` → the worker pod Ready (its /readyz: env and policy built,
  Redis reached), polled every 0.5 s.

No registry is reachable here, so a pull's download is not in these figures; a node without
the image pays import + first start, plus the download of the archive's size.

Usage: ``hack/node/e2e.sh .cluster-node python -m bench.bench_worker_images``
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from tests.node.nodekit import REPO, Node, wait_for

NS = "bench-img"
CONF = {"CONTAINERS_CONF": str(REPO / "hack" / "images" / "containers.conf")}


def node_from_env() -> Node:
    state = Path(os.environ["ROLLOUTFLEET_NODE_STATE"])
    facts = dict(line.split("=", 1) for line in (state / "env").read_text().splitlines() if "=" in line)
    return Node(state, facts)


def ctr(node: Node, *args: str, timeout: float = 1800) -> str:
    socket = node.facts["NODE_CONTAINERD_SOCKET"]
    command = ["ctr", "--address", socket, "--namespace", "k8s.io", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=timeout).stdout


def sizes(ref: str) -> tuple[float, float, str]:
    """(unpacked GB, archive GB, archive path)."""
    env = {**os.environ, **CONF}
    inspect = ["podman", "image", "inspect", "--format", "{{.Size}}", ref]
    unpacked = int(subprocess.run(inspect, capture_output=True, text=True, check=True, env=env).stdout)
    export = [str(REPO / "hack" / "images" / "export.sh"), ref]
    archive = (
        subprocess.run(export, capture_output=True, text=True, check=True, env=env).stdout.strip().splitlines()[-1]
    )
    return unpacked / 1e9, Path(archive).stat().st_size / 1e9, archive


def first_start(node: Node, name: str, ref: str) -> float:
    example = yaml.safe_load((REPO / "charts" / "rolloutfleet" / "examples" / "cartpole.yaml").read_text())
    example["metadata"]["name"] = name
    example["spec"].update({"replicas": 1, "image": ref})
    started = time.monotonic()
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(example))

    def ready() -> bool:
        pod = node.get(NS, "pod", f"{name}-worker-0") or {}
        conditions = (pod.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    deadline = time.monotonic() + 600
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} not ready in 600 s: {node.diagnostics(NS)}")
        time.sleep(0.5)
    took = time.monotonic() - started
    node.kubectl("-n", NS, "delete", "rj", name, "--wait=true", "--timeout=120s", timeout=130)
    return took


def measure(node: Node, kind: str, ref: str) -> dict[str, Any]:
    unpacked, archive_gb, archive = sizes(ref)
    ctr(node, "images", "rm", "--sync", ref)
    started = time.monotonic()
    ctr(node, "images", "import", archive)
    imported = time.monotonic() - started
    start = first_start(node, f"first-{kind}", ref)
    return {"image": ref, "unpacked_gb": unpacked, "archive_gb": archive_gb, "import_s": imported, "ready_s": start}


def main() -> None:
    node = node_from_env()
    version = yaml.safe_load((REPO / "charts" / "rolloutfleet" / "Chart.yaml").read_text())["appVersion"]
    images = {"slim": f"ghcr.io/rolloutfleet/worker:{version}-slim", "full": f"ghcr.io/rolloutfleet/worker:{version}"}
    node.helm("install", "rolloutfleet", "charts/rolloutfleet", "-n", NS, "--create-namespace")
    try:
        for what in ("deployment/rolloutfleet-operator", "statefulset/rolloutfleet-redis"):
            node.kubectl("-n", NS, "rollout", "status", what, "--timeout=240s", timeout=250)
        results = {kind: measure(node, kind, ref) for kind, ref in images.items()}
    finally:
        node.kubectl("-n", NS, "delete", "rj", "--all", "--timeout=120s", check=False, timeout=130)
        node.helm("uninstall", "rolloutfleet", "-n", NS, "--wait", "--timeout", "120s", check=False, timeout=150)
        wait_for(lambda: not (node.get(NS, "pods") or {"items": []})["items"], 120)
    print("| image | size unpacked | OCI archive (pull size) | containerd import | apply → worker Ready | both |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for kind, r in results.items():
        print(
            f"| {kind} `{r['image']}` | {r['unpacked_gb']:.2f} GB | {r['archive_gb']:.2f} GB | {r['import_s']:.1f} s "
            f"| {r['ready_s']:.1f} s | {r['import_s'] + r['ready_s']:.1f} s |"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
