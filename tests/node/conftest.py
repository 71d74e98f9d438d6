"""The node tier: real kubelets, containerd + runc, kube-scheduler, kube-proxy, CoreDNS and
kube-router's NetworkPolicy controller (``hack/node``; two nodes under ``make e2e-node``),
our images built by ``make images``, the chart installed as a user installs it.
``make e2e-node`` starts that cluster, runs these tests against it
(``ROLLOUTFLEET_NODE_STATE`` names its state dir) and tears it down.

Run outside ``make e2e-node`` these tests have no cluster: they are skipped on a
laptop and FAIL under ``CI=true``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.node.nodekit import Node

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.path)).resolve().is_relative_to(here):
            item.add_marker(pytest.mark.node)


@pytest.fixture(scope="session")
def node() -> Node:
    state = os.environ.get("ROLLOUTFLEET_NODE_STATE")
    if not state:
        reason = "no real node: run these through `make e2e-node`"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    facts = {}
    for line in (Path(state) / "env").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            facts[key] = value
    node = Node(Path(state), facts)
    # The tier's tests run on node 1; test_two_nodes uncordons the others for its own.
    for k in range(2, int(facts.get("NODES", "1")) + 1):
        node.kubectl("cordon", facts[f"NODE_{k}_NAME"])
    return node
