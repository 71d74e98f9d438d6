"""Worker pods built from a RolloutJob, and how observed pods are read back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.pods import (
    HASH_ANNOTATION,
    WORKER_LABELS,
    PodView,
    build_pdb,
    build_pod,
    job_labels,
    selector,
    template_hash,
    tolerations,
)
from rolloutfleet_operator.config import OperatorConfig


def job(**spec: Any) -> RolloutJob:
    body: dict[str, Any] = {"replicas": 4, "env": {"id": "CartPole-v1", "numEnvs": 8}}
    body.update(spec)
    return RolloutJob.from_dict({"metadata": {"name": "cp", "namespace": "team"}, "spec": body})


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}


def test_the_pod_is_what_a_worker_needs_and_nothing_more() -> None:
    pod = build_pod(
        job(redis={"url": "redis://r:6379/0", "passwordSecret": {"name": "redis-auth"}}), "uid-1", 2, OperatorConfig()
    )
    assert pod["metadata"]["name"] == "cp-worker-2" and pod["metadata"]["namespace"] == "team"
    assert pod["metadata"]["ownerReferences"][0] == {
        "apiVersion": "rolloutfleet.io/v1alpha1",
        "kind": "RolloutJob",
        "name": "cp",
        "uid": "uid-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    env = env_of(pod)
    # The worker reads back exactly the identity the operator meant.
    plain = {k: v for k, v in env.items() if isinstance(v, str)}
    config = WorkerConfig.from_environ(plain)
    assert (config.worker_index, config.num_workers, config.job.name, config.redis_url) == (
        2,
        4,
        "cp",
        "redis://r:6379/0",
    )
    assert env["ROLLOUTFLEET_REDIS_PASSWORD"] == {"secretKeyRef": {"name": "redis-auth", "key": "password"}}
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["seccompProfile"] == {
        "type": "RuntimeDefault"
    }
    container = spec["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] and container["securityContext"]["capabilities"] == {
        "drop": ["ALL"]
    }
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 9100}


def test_resources_and_placement_pass_through() -> None:
    pod = build_pod(
        job(
            resources={"cpu": "2", "memory": "4Gi", "gpu": 1},
            nodeSelector={"pool": "gpu"},
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            priorityClassName="batch",
            serviceAccountName="sampler",
            image="my/worker:1",
            extraEnv=[{"name": "WANDB_MODE", "value": "offline"}],
        ),
        "u",
        0,
        OperatorConfig(),
    )
    container, spec = pod["spec"]["containers"][0], pod["spec"]
    assert container["resources"] == {
        "requests": {"cpu": "2", "memory": "4Gi"},
        "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"},
    }
    assert container["image"] == "my/worker:1" and env_of(pod)["WANDB_MODE"] == "offline"
    assert spec["nodeSelector"] == {"pool": "gpu"} and spec["priorityClassName"] == "batch"
    assert spec["serviceAccountName"] == "sampler" and spec["automountServiceAccountToken"] is True


def memory_of(pod: dict[str, Any]) -> tuple[str | None, str | None]:
    resources = pod["spec"]["containers"][0]["resources"]
    return resources.get("requests", {}).get("memory"), resources.get("limits", {}).get("memory")


@pytest.mark.parametrize(
    ("spec", "memory"),
    [
        ({}, "192Mi"),  # the default MLP acts in numpy: no torch in the worker
        ({"policy": {"device": "cpu", "hidden": [256, 256]}}, "192Mi"),
        ({"policy": {"inference": "torch"}}, "1Gi"),
        ({"policy": {"entryPoint": "my.models:Net"}}, "1Gi"),
        ({"policy": {"device": "cuda"}}, "1Gi"),
        ({"policy": {"device": "cpu", "recurrent": {"cell": "lstm", "size": 64}}}, "1Gi"),  # acts in torch
        ({"resources": {"gpu": 1}}, "1Gi"),  # device auto in a pod with a GPU
        ({"resources": {"gpu": 1}, "policy": {"device": "cpu"}}, "192Mi"),
        ({"resources": {"memory": "3Gi"}, "policy": {"inference": "torch"}}, "3Gi"),  # the job's own wins
        (
            {
                "multiAgent": {
                    "policies": {"a": {}, "b": {"recurrent": {"cell": "gru"}}},
                    "policyMapping": {"rules": [{"prefix": "", "policy": "a"}]},
                }
            },
            "1Gi",
        ),
        (
            {
                "multiAgent": {
                    "policies": {"a": {}, "b": {"inference": "torch"}},
                    "policyMapping": {"rules": [{"prefix": "", "policy": "a"}]},
                }
            },
            "1Gi",
        ),
    ],
)
def test_memory_defaults_to_what_the_policy_needs(spec: dict[str, Any], memory: str) -> None:
    assert memory_of(build_pod(job(**spec), "u", 0, OperatorConfig())) == (memory, memory)


def test_memory_defaults_come_from_the_operator_config() -> None:
    config = OperatorConfig(worker_memory="300Mi", worker_torch_memory=None)
    assert memory_of(build_pod(job(), "u", 0, config)) == ("300Mi", "300Mi")
    torch_pod = build_pod(job(policy={"inference": "torch"}), "u", 0, config)
    assert memory_of(torch_pod) == (None, None)


def test_the_template_hash_ignores_what_only_steers_the_operator() -> None:
    config = OperatorConfig()
    base = template_hash(job(), config)
    assert template_hash(job(replicas=9, suspend=True, restartPolicy={"maxRestarts": 1}), config) == base
    assert template_hash(job(env={"id": "CartPole-v1", "numEnvs": 16}), config) != base
    # A CartPole job runs the slim image: a new slim image replaces its pods, a new full one does not.
    assert template_hash(job(), OperatorConfig(worker_slim_image="other:2-slim")) != base
    assert template_hash(job(), OperatorConfig(worker_image="other:2")) == base
    assert template_hash(job(), OperatorConfig(worker_slim_image=None)) != base


def test_ports_per_index_for_single_host_test_clusters() -> None:
    config = OperatorConfig(worker_metrics_port=20000, worker_port_per_index=True)
    assert env_of(build_pod(job(), "u", 3, config))["ROLLOUTFLEET_METRICS_PORT"] == "20003"


def test_an_observed_pod_is_read_back() -> None:
    pod = build_pod(job(), "u", 1, OperatorConfig())
    pod["metadata"]["uid"] = "p1"
    pod["status"] = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "state": {
                    "terminated": {
                        "exitCode": 3,
                        "reason": "Error",
                        "message": "Traceback...\nspec.env.id: no such env 'X'\n",
                        "startedAt": "2026-01-01T00:00:00Z",
                        "finishedAt": "2026-01-01T00:00:05Z",
                    }
                }
            }
        ],
    }
    view = PodView.from_pod(pod)
    assert view is not None
    assert (view.index, view.uid, view.exit_code, view.terminated, view.ready) == (1, "p1", 3, True, False)
    assert view.message == "spec.env.id: no such env 'X'"  # the last line: the worker's one-line reason
    assert view.template_hash == pod["metadata"]["annotations"][HASH_ANNOTATION]
    assert PodView.from_pod({"metadata": {"name": "stranger", "labels": {}}}) is None


def test_why_a_pod_waits_is_read_back() -> None:
    pod = build_pod(job(), "u", 0, OperatorConfig())
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}
        ],
    }  # fmt: skip
    view = PodView.from_pod(pod)
    assert view is not None
    assert (view.waiting_reason, view.waiting_message) == (
        "Unschedulable",
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
    )
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {"state": {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "redis" not found'}}}
        ],
    }
    view = PodView.from_pod(pod)
    assert view is not None and (view.waiting_reason, view.waiting_message) == (
        "CreateContainerConfigError",
        'secret "redis" not found',
    )
    pod["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ContainerCreating"}}
    view = PodView.from_pod(pod)
    assert view is not None and view.waiting_reason == ""  # merely on its way


def test_the_selector_matches_the_pod_labels() -> None:
    labels = build_pod(job(), "u", 0, OperatorConfig())["metadata"]["labels"]
    assert all(labels[k] == v for k, v in (pair.split("=") for pair in selector("cp").split(",")))
    assert json.dumps(labels)  # plain strings only


def cpu_of(pod: dict[str, Any]) -> tuple[str | None, str | None, str]:
    resources = pod["spec"]["containers"][0]["resources"]
    request, limit = resources.get("requests", {}).get("cpu"), resources.get("limits", {}).get("cpu")
    return request, limit, env_of(pod)["ROLLOUTFLEET_CPUS"]


@pytest.mark.parametrize(
    ("env", "resources", "expected"),
    [
        ({"numEnvs": 8, "vectorization": "async"}, {"cpu": "2"}, ("2", "2", "2")),  # 2 processes x 4 sub-envs
        ({"numEnvs": 8, "vectorization": "async"}, {"cpu": "1500m"}, ("1500m", "1500m", "2")),
        ({"numEnvs": 8, "vectorization": "async"}, {}, ("4", "4", "4")),  # none set: one per sub-env, up to 4
        ({"numEnvs": 3, "vectorization": "async"}, {}, ("3", "3", "3")),
        ({"numEnvs": 8, "vectorization": "auto"}, {"cpu": "3"}, ("3", "3", "3")),
        ({"numEnvs": 8, "vectorization": "auto"}, {}, (None, None, "1")),  # no request: auto stays in process
        ({"numEnvs": 8, "vectorization": "sync"}, {}, (None, None, "1")),
    ],
)
def test_the_cpu_request_and_the_worker_s_env_processes_agree(
    env: dict[str, Any], resources: dict[str, str], expected: tuple[str | None, str | None, str]
) -> None:
    pod = build_pod(job(env={"id": "CartPole-v1", **env}, resources=resources), "u", 0, OperatorConfig())
    assert cpu_of(pod) == expected


def test_the_job_s_own_variables_come_after_the_cpu_count() -> None:
    extra = [{"name": "ROLLOUTFLEET_CPUS", "value": "1"}]
    pod = build_pod(job(env={"id": "CartPole-v1", "vectorization": "async"}, extraEnv=extra), "u", 0, OperatorConfig())
    names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    assert names.index("ROLLOUTFLEET_CPUS") < len(names) - 1 and names[-1] == "ROLLOUTFLEET_CPUS"


NOT_READY = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}


def test_workers_tolerate_a_lost_node_for_node_loss_seconds_and_the_job_s_own_win() -> None:
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    pod = build_pod(job(tolerations=[gpu], disruption={"nodeLossSeconds": 12}), "u", 0, OperatorConfig())
    assert pod["spec"]["tolerations"] == [
        gpu,
        {**NOT_READY, "tolerationSeconds": 12},
        {**UNREACHABLE, "tolerationSeconds": 12},
    ]
    assert [t.get("tolerationSeconds") for t in tolerations(job())][-2:] == [30, 30]  # the default
    mine = {**UNREACHABLE, "tolerationSeconds": 600}
    assert tolerations(job(tolerations=[mine])) == [mine, {**NOT_READY, "tolerationSeconds": 30}]
    everything = {"operator": "Exists"}  # tolerates every taint, for ever: the job's choice
    assert tolerations(job(tolerations=[everything])) == [everything]


def test_template_metadata_reaches_the_pods_and_replaces_them_when_changed() -> None:
    meta = {
        "labels": {"team": "rl", "kueue.x-k8s.io/pod-group-name": "g"},
        "annotations": {"sidecar.istio.io/inject": "false"},
    }
    pod = build_pod(job(template={"metadata": meta}), "u", 1, OperatorConfig())
    assert (
        pod["metadata"]["labels"]["team"] == "rl" and pod["metadata"]["labels"]["rolloutfleet.io/worker-index"] == "1"
    )
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "g"
    assert pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    assert HASH_ANNOTATION in pod["metadata"]["annotations"]
    config = OperatorConfig()
    base = template_hash(job(), config)
    # Like a Deployment's template: new labels replace the pods (admission webhooks see new pods only).
    assert template_hash(job(template={"metadata": meta}), config) != base
    assert template_hash(job(disruption={"nodeLossSeconds": 5}), config) != base  # the tolerations change
    assert template_hash(job(disruption={"maxUnavailable": 3}), config) == base  # the PDB only


def test_the_operator_s_own_labels_are_the_ones_the_spec_refuses() -> None:
    from rolloutfleet.spec.sections.disruption import RESERVED_LABELS, RESERVED_PREFIX

    assert tuple(WORKER_LABELS) == RESERVED_LABELS
    assert all(k.startswith(RESERVED_PREFIX) for k in build_pod(job(), "u", 0, OperatorConfig())["metadata"]["labels"]
               if k not in WORKER_LABELS)  # fmt: skip


def test_the_pdb_selects_the_job_s_workers_and_is_owned_by_the_job() -> None:
    pdb = build_pdb(job(disruption={"maxUnavailable": "50%"}), "job-uid")
    assert pdb["metadata"]["name"] == "cp-workers" and pdb["metadata"]["ownerReferences"][0]["uid"] == "job-uid"
    assert pdb["spec"] == {
        "maxUnavailable": "50%",
        "selector": {"matchLabels": job_labels("cp")},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }
    worker = build_pod(job(), "u", 0, OperatorConfig())["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= worker.items()
    assert build_pdb(job(), "u")["spec"]["maxUnavailable"] == "25%"


def test_the_disruption_condition_and_the_deletion_time_are_read_back() -> None:
    pod = build_pod(job(), "u", 0, OperatorConfig())
    pod["metadata"].update(uid="p", deletionTimestamp="2026-01-01T00:00:30Z")
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    pod["status"] = {"phase": "Running", "conditions": [{**condition, "message": "Eviction API: evicting"}]}
    view = PodView.from_pod(pod)
    assert view is not None and view.deleting and view.deletion_at == "2026-01-01T00:00:30Z"
    assert (view.disruption, view.disruption_message) == ("EvictionByEvictionAPI", "Eviction API: evicting")
    pod["status"]["conditions"] = [{**condition, "status": "False"}]  # a condition that says no
    assert PodView.from_pod(pod).disruption == ""  # type: ignore[union-attr]


def test_workers_are_spread_over_nodes_unless_the_job_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    (spread,) = build_pod(job(), "uid-1", 0, OperatorConfig())["spec"]["topologySpreadConstraints"]
    assert spread == {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": job_labels("cp")},  # this job's workers, not its evaluators
    }
    zones = [{"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
              "labelSelector": {"matchLabels": {"app": "x"}}}]  # fmt: skip
    assert (
        build_pod(job(topologySpreadConstraints=zones), "uid-1", 0, OperatorConfig())["spec"][
            "topologySpreadConstraints"
        ]
        == zones
    )
    assert (
        "topologySpreadConstraints"
        not in build_pod(job(topologySpreadConstraints=[]), "u", 0, OperatorConfig())["spec"]
    )
    # Unset, the field hashes as if the spec had no such field (as before it was added): an
    # operator upgrade replaces no pod.
    unset = template_hash(job(), OperatorConfig())
    as_dict = RolloutJob.to_dict

    def before_the_field(self: RolloutJob) -> dict[str, Any]:
        found = as_dict(self)
        del found["spec"]["topologySpreadConstraints"]
        return found

    monkeypatch.setattr(RolloutJob, "to_dict", before_the_field)
    assert template_hash(job(), OperatorConfig()) == unset
    monkeypatch.undo()
    assert template_hash(job(topologySpreadConstraints=zones), OperatorConfig()) != template_hash(
        job(), OperatorConfig()
    )
