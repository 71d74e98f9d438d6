"""The RolloutFleet operator: reconciles RolloutJobs into worker pods.

Pure logic (what pods should exist, what to do about the ones that do, what the status
says) lives in :mod:`.pods`, :mod:`.plan` and :mod:`.status`; :mod:`.handlers` is the
thin kopf layer that observes the cluster and carries out a plan.
"""

__version__ = "0.1.0"
