"""Pick the runner a job needs: :class:`EnvRunner` (single-agent) or
:class:`MultiAgentEnvRunner` (``spec.multiAgent``), both kept to one contract
(:class:`~rolloutfleet.sampling.runner_base.Runner`); their batches are :class:`SampleBatch` and
:class:`MultiAgentBatch`::

    with make_env_runner(job, worker_index=0) as runner:
        batch = runner.sample()

:func:`build_model` (:func:`build_policy_models` for a multi-agent job) gives a learner the
model every worker starts from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rolloutfleet.inference.policy import INIT_SEED_PATH, Policy
from rolloutfleet.sampling.callbacks import Callbacks
from rolloutfleet.sampling.env.creators import derive_seed
from rolloutfleet.sampling.env_runner import EnvRunner
from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner
from rolloutfleet.sampling.multiagent.policy_mapping import multi_agent_spec
from rolloutfleet.sampling.runner_base import AnyRunner
from rolloutfleet.sampling.vector.make import env_spaces
from rolloutfleet.spec.job import RolloutJob

if TYPE_CHECKING:
    from torch import nn


def make_env_runner(
    job: RolloutJob, worker_index: int = 0, num_workers: int | None = None, callbacks: Callbacks | None = None
) -> AnyRunner:
    """The runner for ``job``: multi-agent when ``spec.multiAgent`` is set, an action server
    (:class:`~rolloutfleet.external.runner.ExternalRunner`) when ``spec.env.external`` is."""
    if job.spec.env.external is not None:
        from rolloutfleet.external.runner import ExternalRunner

        return ExternalRunner(job, worker_index, num_workers, callbacks)
    if job.spec.multi_agent is not None:
        return MultiAgentEnvRunner(job, worker_index, num_workers, callbacks)
    return EnvRunner(job, worker_index, num_workers, callbacks)


def build_model(job: RolloutJob) -> nn.Module:
    """The job's policy model with the weights every worker starts from (for a learner).

    Builds one sub-environment to learn the spaces, then the policy exactly as workers do
    (same seed, same initial weights: the default MLP's come from the numpy initializer that
    torch-free workers use), and returns it as a torch module on the CPU.

    >>> model = build_model(RolloutJob.from_file("examples/cartpole.yaml"))  # doctest: +SKIP
    """
    from rolloutfleet.sampling.env.external_spaces import external_spaces

    spec_env = job.spec.env
    observation_space, action_space = external_spaces(spec_env) or env_spaces(spec_env, 0, job.spec.replicas)
    spec = job.spec.policy.model_copy(update={"device": "cpu", "num_threads": None})
    policy = Policy(
        spec, observation_space, action_space, init_seed=derive_seed(job.spec.sampling.seed, INIT_SEED_PATH)
    )
    return policy.torch_model()


def build_policy_models(job: RolloutJob) -> dict[str, nn.Module]:
    """Policy id -> its torch model with the weights every worker starts from (for a learner).

    >>> models = build_policy_models(RolloutJob.from_file("examples/multiagent.yaml"))  # doctest: +SKIP
    """
    cpu = job.model_copy(
        update={
            "spec": job.spec.model_copy(
                update={
                    "env": job.spec.env.model_copy(update={"num_envs": 1}),
                    "policy": job.spec.policy.model_copy(update={"device": "cpu", "num_threads": None}),
                    "multi_agent": multi_agent_spec(job).model_copy(
                        update={
                            "policies": {
                                policy_id: overrides.model_copy(update={"device": "cpu", "num_threads": None})
                                for policy_id, overrides in multi_agent_spec(job).policies.items()
                            }
                        }
                    ),
                }
            )
        }
    )
    with MultiAgentEnvRunner(cpu) as runner:
        return {policy_id: policy.torch_model() for policy_id, policy in runner.policies.items()}
