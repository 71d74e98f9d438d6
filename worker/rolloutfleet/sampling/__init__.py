"""Stepping environments with a policy into batches: :mod:`.env_runner` (single-agent,
vectorized), :mod:`.multiagent_env_runner` (PettingZoo), :mod:`.runners` (the one factory
the worker calls), the shared row buffer (:mod:`.grid`), env construction (:mod:`.envs`,
:mod:`.multiagent_env`), agent→policy mapping and user callbacks. No Redis I/O.
"""
