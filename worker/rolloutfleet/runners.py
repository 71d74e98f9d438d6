"""Pick the runner a job needs: :class:`EnvRunner` (single-agent) or
:class:`MultiAgentEnvRunner` (``spec.multiAgent``). Both have ``sample()``, ``get_metrics()``,
``weights_seq_no``, ``close()``; their batches are :class:`SampleBatch` and
:class:`MultiAgentBatch`::

    with make_env_runner(job, worker_index=0) as runner:
        batch = runner.sample()
"""

from __future__ import annotations

from rolloutfleet.callbacks import Callbacks
from rolloutfleet.multiagent_sampler import MultiAgentEnvRunner
from rolloutfleet.sampler import EnvRunner
from rolloutfleet.spec import RolloutJob

AnyEnvRunner = EnvRunner | MultiAgentEnvRunner


def make_env_runner(
    job: RolloutJob, worker_index: int = 0, num_workers: int | None = None, callbacks: Callbacks | None = None
) -> AnyEnvRunner:
    """The runner for ``job``: multi-agent when ``spec.multiAgent`` is set."""
    if job.spec.multi_agent is not None:
        return MultiAgentEnvRunner(job, worker_index, num_workers, callbacks)
    return EnvRunner(job, worker_index, num_workers, callbacks)
