"""The RolloutFleet operator: reconciles RolloutJobs into worker pods.

Pure logic (what pods should exist, what to do about the ones that do, what the status
says, what this process remembers of its own calls) lives in :mod:`.pods`, :mod:`.plan`,
:mod:`.status` and :mod:`.observe`; :mod:`.reconcile` runs one round with them and the
thin :mod:`.api_calls`; :mod:`.coalescing` spaces the rounds; :mod:`.handlers` only
registers with kopf (importing it is the operator's entry point).
"""

__version__ = "0.1.0"
