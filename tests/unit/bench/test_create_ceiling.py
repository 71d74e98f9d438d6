"""bench.create_ceiling: the bare client posts exactly the pods (and the PDB) the operator would."""

from __future__ import annotations

import json

from bench.bench_operator import job
from bench.create_ceiling import pdb_body, pod_bodies
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.pods import build_pdb, build_pod
from rolloutfleet_operator.config import OperatorConfig

ENV = {"ROLLOUTFLEET_WORKER_PORT_PER_INDEX": "1"}


def test_the_bodies_are_the_operators_own() -> None:
    body = job("big", 3, "redis://127.0.0.1:6379")
    body["metadata"]["namespace"] = "ceiling"
    bodies = pod_bodies(body, "job-uid", 3, ENV)
    spec = RolloutJob.from_dict(body)
    config = OperatorConfig.from_environ(ENV)
    assert [json.loads(b) for b in bodies] == [build_pod(spec, "job-uid", i, config) for i in range(3)]
    assert [json.loads(b)["metadata"]["name"] for b in bodies] == ["big-worker-0", "big-worker-1", "big-worker-2"]
    assert pdb_body(body, "job-uid") == build_pdb(spec, "job-uid")
