"""What a RolloutJob says, and what the operator and the worker share about it.

The bottom layer: pydantic and the standard library only (no torch, gymnasium, numpy or
Redis), so the operator imports it without the sampling stack. :mod:`.job` is the
RolloutJob model; :mod:`.worker_config` the environment a worker pod is started with;
:mod:`.restarts` the restart rules; :mod:`.redis_keys` the job's Redis key names;
:mod:`.learners` which consumer groups count as learners; :mod:`.autoscale` the
autoscaling rule (``spec.autoscaling``, :mod:`.autoscaling`) on the signals of :mod:`.appetite`;
:mod:`.entry_points` how ``module:attr`` strings in a spec are loaded.
"""
