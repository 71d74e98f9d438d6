"""The RolloutJob manifest model: what a RolloutJob says.

The bottom layer: pydantic and the standard library only (no torch, gymnasium, numpy or
Redis), so the operator imports it without the sampling stack. :mod:`.job` is the
RolloutJob model, a section a module (:mod:`.env_spec`, :mod:`.policy_spec`,
:mod:`.autoscaling`, ...); :mod:`.model_base`, :mod:`.fields` and :mod:`.error_lines` what
the sections share; :mod:`.redis_url` and :mod:`.entry_points` how its URLs and
``module:attr`` strings are read. The rules built on it that the operator and the local
fleet share live in :mod:`rolloutfleet.rules`.
"""
