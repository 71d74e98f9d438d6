"""Which workers will load torch, read from the RolloutJob alone (for sizing their pods).

A worker's default MLP on the CPU acts in numpy and never imports torch (about 70 MB of
resident memory against about 560 MB with torch, measured by ``make bench``). torch is
certain when a policy has an ``entryPoint``, ``recurrent`` (the LSTM/GRU model), ``inference:
torch``, a ``cuda`` device, or ``device: auto`` in a pod given a GPU. One case only the env can tell: image observations
(the default CNN) load torch too; such jobs should set ``resources.memory``.
"""

from __future__ import annotations

from rolloutfleet.spec.job import PolicySpec, RolloutJob


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


def job_needs_torch(job: RolloutJob) -> bool:
    """Whether any of the job's policies surely loads torch in its workers."""
    return any(policy_needs_torch(policy, job.spec.resources.gpu) for policy in job_policies(job))
