"""Stepping environments with a policy into batches: :mod:`.env_runner` (single-agent,
vectorized), :mod:`.multiagent` (PettingZoo: its runner, envs and policy mapping), :mod:`.runners` (the one factory
the worker calls), the shared row buffer (:mod:`.grid`), env construction (:mod:`.envs`,
:mod:`.vector`) and user callbacks. No Redis I/O.
"""
