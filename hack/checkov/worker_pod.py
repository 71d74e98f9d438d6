"""Print, as YAML, what the operator writes for a job: its worker pod (built by
``rolloutfleet_operator.children.pods.build_pod``) and its NetworkPolicy, for checkov (make lint).

    python hack/checkov/worker_pod.py charts/rolloutfleet/examples/cartpole.yaml

The operator's configuration is the chart's: the environment of the rendered Deployment
(``--chart RENDERED.yaml``), else the operator's defaults with NetworkPolicies on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.network import build_network_policy
from rolloutfleet_operator.children.pods import build_pod, job_labels, owner_reference
from rolloutfleet_operator.config import OperatorConfig


def operator_config(rendered: Path | None) -> OperatorConfig:
    if rendered is None:
        return OperatorConfig(worker_network_policy=True)
    docs = [d for d in yaml.safe_load_all(rendered.read_text()) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return OperatorConfig.from_environ({e["name"]: e["value"] for e in env if "value" in e})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", type=Path, help="a RolloutJob manifest")
    parser.add_argument("--namespace", default="default", help="the job's namespace")
    parser.add_argument("--chart", type=Path, help="the rendered chart: the operator's environment from it")
    args = parser.parse_args()
    manifest = yaml.safe_load(args.job.read_text())
    manifest.setdefault("metadata", {})["namespace"] = args.namespace
    job = RolloutJob.from_dict(manifest)
    config = operator_config(args.chart)
    uid = "00000000-0000-0000-0000-000000000000"
    documents = [build_pod(job, uid, 0, config)]
    policy = build_network_policy(job, config, job_labels(job.name), owner_reference(job, uid))
    if policy is not None:
        documents.append(policy)
    yaml.safe_dump_all(documents, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
