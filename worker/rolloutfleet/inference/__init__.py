"""Observations → actions: the torch :mod:`.policy` with its default :mod:`.models`, the
action :mod:`.distributions`, and the numpy fast path for small MLPs
(:mod:`.numpy_inference`). No Redis, no environments.
"""
