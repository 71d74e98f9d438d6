"""The BLAS thread pool of numpy's matmuls, sized by the job (``policy.numThreads``).

numpy's OpenBLAS starts one thread per CPU it sees. For the per-step batches a rollout
worker multiplies (a few hundred KB at most), those threads cost more in wake-ups than they
save, and on a node shared with other pods they contend for the same cores: on 2 busy
cores, 1 024 CartPole envs sampled 3-15x faster with one BLAS thread than with two.
``policy.numThreads`` (default 1) sizes both torch's intra-op pool and this one; null
leaves both at the libraries' defaults.

The limit is process-wide, so a worker process sets it (``rolloutfleet worker``,
``rolloutfleet sample``); a learner that builds an ``EnvRunner`` in its own process
decides for itself whether to call :func:`limit_cpu_threads`.
"""

from __future__ import annotations

import numpy  # noqa: F401  # loaded first: threadpoolctl limits the libraries already in the process
from threadpoolctl import threadpool_limits

__all__ = ["limit_cpu_threads"]


def limit_cpu_threads(num_threads: int | None) -> None:
    """Limit BLAS (numpy's OpenBLAS, and any other BLAS loaded) to ``num_threads``; None: no limit."""
    if num_threads is not None:
        threadpool_limits(limits=num_threads, user_api="blas")
