"""Which workers will load torch, read from the RolloutJob alone (for sizing their pods).

A worker's default MLP on the CPU acts in numpy and never imports torch (about 70 MB of
resident memory against about 560 MB with torch, ``make bench``). The rule, which the
operator also uses to size memory and pick the slim or the full worker image, is listed in
docs/worker-images.md; env images only the env can tell go unseen (such jobs set
``resources.memory`` and ``policy.inference: torch``).

CPUs (:func:`pod_cpu`, :func:`pod_cpus`): an ``async`` job's pod requests ``resources.cpu``,
else one CPU per sub-env up to :data:`ASYNC_DEFAULT_CPUS`; the worker is told the same count
(``ROLLOUTFLEET_CPUS``). Why: docs/guides/heavy-envs.md.
"""

from __future__ import annotations

import math

from rolloutfleet.spec.job import EnvSpec, PolicySpec, RolloutJob, parse_quantity

ASYNC_DEFAULT_CPUS = 4
"""The CPU request of an ``async`` job that sets no ``resources.cpu``: ``min(numEnvs, this)``."""


def job_policies(job: RolloutJob) -> list[PolicySpec]:
    """``spec.policy``, or each multi-agent policy with its overrides applied."""
    multi = job.spec.multi_agent
    if multi is None:
        return [job.spec.policy]
    return [overrides.apply(job.spec.policy) for overrides in multi.policies.values()]


def policy_needs_torch(policy: PolicySpec, gpus: int) -> bool:
    """Whether this policy surely acts in torch in a pod with ``gpus`` GPUs."""
    return (
        policy.entry_point is not None
        or policy.recurrent is not None
        or policy.inference == "torch"
        or policy.device.startswith("cuda")
        or (policy.device == "auto" and gpus > 0)
    )


IMAGE_WRAPPERS = frozenset({"AtariPreprocessing", "ResizeObservation", "GrayscaleObservation"})
"""Wrappers of ``spec.env.wrappers`` that exist for image observations (and resize with OpenCV)."""


def env_gives_images(env: EnvSpec) -> bool:
    """Whether the env surely hands the policy images: an ALE game (``ALE/Pong-v5``) unless it is
    the RAM form (``-ram`` ids, ``obs_type: ram``), or an image wrapper.

    >>> env_gives_images(EnvSpec(id="ALE/Pong-v5")), env_gives_images(EnvSpec(id="ALE/Pong-ram-v5"))
    (True, False)
    """
    if any(wrapper.name in IMAGE_WRAPPERS for wrapper in env.wrappers):
        return True
    env_id = env.id or ""
    return env_id.startswith("ALE/") and "-ram" not in env_id and env.config.get("obs_type") != "ram"


def job_needs_torch(job: RolloutJob) -> bool:
    """Whether any of the job's policies surely loads torch in its workers."""
    if env_gives_images(job.spec.env):
        return True
    return any(policy_needs_torch(policy, job.spec.resources.gpu) for policy in job_policies(job))


def pod_cpu(job: RolloutJob) -> str | None:
    """The worker pod's CPU request (and limit): ``resources.cpu``, else for ``async`` one CPU per
    sub-env up to :data:`ASYNC_DEFAULT_CPUS`, else None (no request).

    >>> job = RolloutJob.from_dict({"metadata": {"name": "a"},
    ...                             "spec": {"env": {"id": "X-v0", "numEnvs": 8, "vectorization": "async"}}})
    >>> pod_cpu(job), pod_cpus(job)
    ('4', 4)
    """
    spec = job.spec
    if spec.resources.cpu is not None:
        return spec.resources.cpu
    if spec.env.vectorization == "async":
        return str(min(spec.env.num_envs, ASYNC_DEFAULT_CPUS))
    return None


def pod_cpus(job: RolloutJob) -> int:
    """The CPUs a worker in the pod may keep busy: :func:`pod_cpu` rounded up, 1 without a request."""
    cpu = pod_cpu(job)
    return 1 if cpu is None else max(1, math.ceil(parse_quantity(cpu)))


def local_cpus(job: RolloutJob, machine_cpus: int) -> int:
    """The CPUs each worker of ``rolloutfleet run`` may keep busy on a machine with ``machine_cpus``:
    what its pod would get (:func:`pod_cpus`, at most the machine's) when the job asks for CPUs,
    else an equal share of the machine among the replicas, so async env processes of several
    workers do not oversubscribe it.

    >>> job = RolloutJob.from_dict({"metadata": {"name": "a"}, "spec": {"replicas": 3, "env": {"id": "X-v0"}}})
    >>> local_cpus(job, 8)
    2
    """
    if pod_cpu(job) is not None:
        return max(1, min(pod_cpus(job), machine_cpus))
    return max(1, machine_cpus // max(job.spec.replicas, 1))
