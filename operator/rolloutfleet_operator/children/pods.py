"""Worker pods of a RolloutJob: how they are named, labelled, built and recognised.

Pure functions of the job, the operator's configuration and an index; no API calls.
A pod carries the hash of everything in its template that comes from the job's spec
(:func:`template_hash`), so the reconciler can tell a stale pod from a current one
without comparing pod specs field by field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from rolloutfleet.rules.footprint import job_needs_torch, pod_cpu, pod_cpus
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import API_VERSION, KIND, RolloutJob
from rolloutfleet_operator.children.images import worker_image
from rolloutfleet_operator.children.network import ca_mount
from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.redis.secrets import admin_source, worker_env

GROUP = "rolloutfleet.io"
JOB_LABEL = f"{GROUP}/job"
INDEX_LABEL = f"{GROUP}/worker-index"
HASH_ANNOTATION = f"{GROUP}/template-hash"
MANAGED_BY = "rolloutfleet-operator"
WORKER_LABELS = {
    "app.kubernetes.io/name": "rolloutfleet",
    "app.kubernetes.io/component": "worker",
    "app.kubernetes.io/managed-by": MANAGED_BY,
}
# Spec fields that change how a running worker behaves. replicas, suspend, restartPolicy, autoscaling
# and the PodDisruptionBudget only steer the operator: changing them replaces no pod.
_OPERATOR_ONLY_FIELDS = ("replicas", "suspend", "restartPolicy", "autoscaling", "network", "evaluation")
_OPERATOR_ONLY_DISRUPTION = ("maxUnavailable",)
# A worker on a node that stops reporting: replaced after spec.disruption.nodeLossSeconds.
NODE_LOSS_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
UID = 10001  # the worker image's non-root user


def pod_name(job_name: str, index: int) -> str:
    return f"{job_name}-worker-{index}"


def selector(job_name: str) -> str:
    """The label selector of a job's pods (``status.selector``, for the scale subresource)."""
    return ",".join(f"{k}={v}" for k, v in sorted(job_labels(job_name).items()))


def job_labels(job_name: str) -> dict[str, str]:
    return {**WORKER_LABELS, JOB_LABEL: job_name}


def template_hash(job: RolloutJob, config: OperatorConfig) -> str:
    spec = {k: v for k, v in job.to_dict()["spec"].items() if k not in _OPERATOR_ONLY_FIELDS}
    spec["disruption"] = {k: v for k, v in spec["disruption"].items() if k not in _OPERATOR_ONLY_DISRUPTION}
    # Fields added later, unset: hashed as before they existed (an operator upgrade replaces no pod).
    spec["redis"] = {k: v for k, v in spec["redis"].items() if k not in ("tls", "adminSecret") or v is not None}
    if not spec["redis"].get("readReplicas"):
        spec["redis"].pop("readReplicas", None)
    spec["sampling"] = {k: v for k, v in spec["sampling"].items() if k != "infos" or v}
    for later in ("topologySpreadConstraints", "league"):
        if spec.get(later) is None:
            spec.pop(later, None)
    material = {
        "spec": spec,
        "image": worker_image(job, config),
        "command": config.worker_command,
        "port": config.worker_metrics_port,
        "grace": config.grace_seconds,
    }
    if admin_source(job, config) is not None:  # per-job Redis users: workers log in as the job's user
        material["redisUsers"] = True
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def owner_reference(job: RolloutJob, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": job.name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def build_pod(
    job: RolloutJob, uid: str, index: int, config: OperatorConfig, hash_: str | None = None
) -> dict[str, Any]:
    """The worker pod for ``index`` (0-based) of ``job`` (whose metadata.uid is ``uid``).
    The job's ``template.metadata`` comes first: the spec refuses keys of ours, and ours win."""
    extra = job.spec.template.metadata
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(job.name, index),
            "namespace": job.namespace,
            "labels": {**extra.labels, **job_labels(job.name), INDEX_LABEL: str(index)},
            "annotations": {**extra.annotations, HASH_ANNOTATION: hash_ or template_hash(job, config)},
            "ownerReferences": [owner_reference(job, uid)],
        },
        "spec": _pod_spec(job, config, _container(job, index, config)),
    }


def _worker_env(job: RolloutJob, index: int, config: OperatorConfig) -> list[dict[str, Any]]:
    """The worker's identity and settings (read back by ``WorkerConfig.from_environ``),
    the Redis password by reference to its Secret, then the job's own variables."""
    spec = job.spec
    worker = WorkerConfig(
        job=job,
        worker_index=index,
        num_workers=max(spec.replicas, index + 1),
        redis_url=spec.redis.url,
        metrics_port=config.metrics_port(index),
    )
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in worker.to_environ().items()]
    if admin_source(job, config) is not None:  # per-job Redis users (.redis_users): the job's worker user
        env += worker_env(job)
    elif spec.redis.password_secret is not None:
        ref = {"name": spec.redis.password_secret.name, "key": spec.redis.password_secret.key}
        env.append({"name": "ROLLOUTFLEET_REDIS_PASSWORD", "valueFrom": {"secretKeyRef": ref}})
    if (ca := ca_mount(job)) is not None:
        env.append(ca[2])
    env.append({"name": "ROLLOUTFLEET_TERMINATION_LOG", "value": "/dev/termination-log"})
    # The env processes of async (and of auto, should it pick async) follow the pod's CPU request.
    env.append({"name": "ROLLOUTFLEET_CPUS", "value": str(pod_cpus(job))})
    env += [dict(var) for var in spec.env_vars]
    return env


def _resources(job: RolloutJob, config: OperatorConfig) -> dict[str, Any]:
    """Requests equal to limits; the GPU as a limit only (Kubernetes sets an extended
    resource's request to its limit). Memory the job leaves out is the operator's default:
    a torch worker's when a policy loads torch, else the smaller numpy worker's. CPU: the
    job's, or one per async env process (:func:`rolloutfleet.rules.footprint.pod_cpu`)."""
    wanted = job.spec.resources
    quantities: dict[str, str] = {}
    cpu = pod_cpu(job)
    if cpu is not None:
        quantities["cpu"] = cpu
    memory = wanted.memory
    if memory is None:
        memory = config.worker_torch_memory if job_needs_torch(job) else config.worker_memory
    if memory is not None:
        quantities["memory"] = str(memory)
    limits = dict(quantities)
    if wanted.gpu:
        limits["nvidia.com/gpu"] = str(wanted.gpu)
    resources: dict[str, Any] = {}
    if quantities:
        resources["requests"] = dict(quantities)
    if limits:
        resources["limits"] = limits
    return resources


def _container(job: RolloutJob, index: int, config: OperatorConfig) -> dict[str, Any]:
    port = config.metrics_port(index)
    container: dict[str, Any] = {
        "name": "worker",
        "image": worker_image(job, config),
        "command": list(config.worker_command),
        "env": _worker_env(job, index, config),
        "ports": [{"name": "metrics", "containerPort": port, "protocol": "TCP"}, *_external_ports(job)],
        "resources": _resources(job, config),
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": port},
            "periodSeconds": 5,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": port},
            "initialDelaySeconds": 30,
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    if (ca := ca_mount(job)) is not None:
        container["volumeMounts"].append(ca[1])
    if job.spec.image_pull_policy is not None:
        container["imagePullPolicy"] = job.spec.image_pull_policy
    return container


def _pod_spec(job: RolloutJob, config: OperatorConfig, container: dict[str, Any]) -> dict[str, Any]:
    spec = job.spec
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",  # the operator replaces failed pods, counting restarts
        "terminationGracePeriodSeconds": config.grace_seconds,
        "automountServiceAccountToken": spec.service_account_name is not None,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "fsGroup": UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }
    if (ca := ca_mount(job)) is not None:
        pod_spec["volumes"].append(ca[0])
    if spec.service_account_name is not None:
        pod_spec["serviceAccountName"] = spec.service_account_name
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    pod_spec["tolerations"] = tolerations(job)
    if spec.affinity:
        pod_spec["affinity"] = dict(spec.affinity)
    spread = spread_constraints(job)
    if spread:
        pod_spec["topologySpreadConstraints"] = spread
    if spec.priority_class_name:
        pod_spec["priorityClassName"] = spec.priority_class_name
    return pod_spec


def spread_constraints(job: RolloutJob) -> list[dict[str, Any]]:
    """The job's own ``topologySpreadConstraints``, else one that spreads its workers over
    nodes as evenly as the scheduler can (``ScheduleAnyway``: a full or single node still
    takes them)."""
    own = job.spec.topology_spread_constraints
    if own is not None:
        return [dict(c) for c in own]
    return [{
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": job_labels(job.name)},
    }]  # fmt: skip


def tolerations(job: RolloutJob) -> list[dict[str, Any]]:
    """The job's tolerations, then the node-loss ones (``nodeLossSeconds``) for the keys the
    job does not tolerate itself: a user's own toleration of ``unreachable`` wins. Without
    ours, the API server adds 300 s ones (DefaultTolerationSeconds)."""
    own = [dict(t) for t in job.spec.tolerations]
    taken = {t.get("key") for t in own if t.get("effect") in (None, "", "NoExecute")}
    if "" in taken or None in taken:  # a toleration of every taint (no key, Exists): the job's choice
        taken.update(NODE_LOSS_TAINTS)
    seconds = job.spec.disruption.node_loss_seconds
    for key in NODE_LOSS_TAINTS:
        if key not in taken:
            own.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds})
    return own


def build_pdb(job: RolloutJob, uid: str) -> dict[str, Any]:
    """The job's PodDisruptionBudget, ``<job>-workers``: evictions (drains) take at most
    ``spec.disruption.maxUnavailable`` workers at a time. The disruption controller finds
    the job's ``replicas`` through its scale subresource. A worker that is not ready may
    always be evicted (``AlwaysAllow``): it samples nothing, and blocking a drain on it
    would hold the node for no gain."""
    return _owned(job, uid, "policy/v1", "PodDisruptionBudget", pdb_name(job.name), pdb_spec(job))


def _owned(job: RolloutJob, uid: str, api_version: str, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A child object of the job: in its namespace, with its labels, owned by it."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": job_labels(job.name),
            "ownerReferences": [owner_reference(job, uid)],
        },
        "spec": spec,
    }


def _external_ports(job: RolloutJob) -> list[dict[str, Any]]:
    external = job.spec.env.external
    return [] if external is None else [{"name": "external", "containerPort": external.port, "protocol": "TCP"}]


def build_service(job: RolloutJob, uid: str) -> dict[str, Any] | None:
    """An external env's Service, ``<job>-external``: simulators reach the ready workers'
    action endpoints on ``spec.env.external.port`` (spread over them per connection); None
    for a job whose workers step their own envs."""
    if job.spec.env.external is None:
        return None
    return _owned(job, uid, "v1", "Service", service_name(job.name), service_spec(job))


def service_name(job_name: str) -> str:
    return f"{job_name}-external"


def service_spec(job: RolloutJob) -> dict[str, Any]:
    external = job.spec.env.external
    assert external is not None  # build_service's caller checked
    port = {"name": "external", "port": external.port, "targetPort": "external", "protocol": "TCP"}
    return {"selector": job_labels(job.name), "ports": [port], "type": "ClusterIP"}


def pdb_name(job_name: str) -> str:
    return f"{job_name}-workers"


def pdb_spec(job: RolloutJob) -> dict[str, Any]:
    return {
        "maxUnavailable": job.spec.disruption.max_unavailable,
        "selector": {"matchLabels": job_labels(job.name)},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }


@dataclass(frozen=True)
class PodView:
    """What the reconciler needs to know about an observed worker pod (small: 1 000 of
    them stay cheap to keep in the operator's index)."""

    name: str
    uid: str
    index: int
    template_hash: str
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    ready: bool = False
    deleting: bool = False
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    waiting_reason: str = ""  # why a live pod does not run yet: Unschedulable, ImagePullBackOff, ...
    waiting_message: str = ""
    disruption: str = ""  # reason of a DisruptionTarget=True condition (EvictionByEvictionAPI, ...)
    disruption_message: str = ""
    deletion_at: str | None = None  # metadata.deletionTimestamp: the end of its grace period
    role: str = "worker"  # or "evaluator": an evaluation pod (.evaluators), outside the worker plan

    @property
    def terminated(self) -> bool:
        return self.phase in ("Failed", "Succeeded")

    @classmethod
    def from_pod(cls, pod: Any) -> PodView | None:
        """None for a pod that is not a worker pod of ours (no parsable index label)."""
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        try:
            index = int(labels[INDEX_LABEL])
        except (KeyError, ValueError, TypeError):
            return None
        status = pod.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        started = finished = None
        exit_code = None
        reason, message = status.get("reason") or "", status.get("message") or ""
        waiting_reason = waiting_message = ""
        disruption = disruption_message = ""
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                waiting_reason, waiting_message = cond.get("reason") or "Unschedulable", cond.get("message") or ""
            elif cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
                disruption, disruption_message = cond.get("reason") or "DisruptionTarget", cond.get("message") or ""
        for container in status.get("containerStatuses") or []:
            state = container.get("state") or {}
            waiting = state.get("waiting") or {}
            if waiting.get("reason") and waiting["reason"] not in _STARTING:
                waiting_reason, waiting_message = waiting["reason"], waiting.get("message") or ""
            if "running" in state:
                started = (state["running"] or {}).get("startedAt")
            if "terminated" in state:
                term = state["terminated"] or {}
                started, finished = term.get("startedAt"), term.get("finishedAt")
                exit_code = term.get("exitCode")
                reason = term.get("reason") or reason
                message = (term.get("message") or message).strip()
        return cls(
            name=metadata.get("name", ""),
            uid=metadata.get("uid", ""),
            index=index,
            template_hash=(metadata.get("annotations") or {}).get(HASH_ANNOTATION, ""),
            phase=status.get("phase") or "Pending",
            ready=ready,
            deleting=metadata.get("deletionTimestamp") is not None,
            started_at=started,
            finished_at=finished,
            exit_code=exit_code,
            reason=reason,
            message=_one_line(message),
            waiting_reason=waiting_reason,
            waiting_message=_one_line(waiting_message),
            disruption=disruption,
            disruption_message=_one_line(disruption_message),
            deletion_at=metadata.get("deletionTimestamp"),
        )


_STARTING = frozenset({"ContainerCreating", "PodInitializing"})
"""Container waiting reasons that only mean "on its way"."""


def _one_line(message: str, limit: int = 300) -> str:
    """The last non-empty line (a traceback's conclusion, a worker's one-line reason)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""
