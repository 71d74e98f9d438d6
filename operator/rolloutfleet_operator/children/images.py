"""Which worker image a job's pods run: ``spec.image``, else the slim or the full worker image.

The slim image (``worker:<version>-slim``, 0.35 GB) has everything a policy acting in numpy
needs and no torch, CUDA or OpenCV; the full one (``worker:<version>``, 6.1 GB) has PyPI's CUDA
torch. A job gets the slim image when none of its policies loads torch and its pods get no GPU:
the rule that also sizes their memory (:func:`rolloutfleet.rules.footprint.job_needs_torch`).
``spec.image`` always wins; an operator told ``ROLLOUTFLEET_WORKER_SLIM_IMAGE=none`` runs the
full image for every job. ``status.image`` (``kubectl get rj -o wide``) says which one.
"""

from __future__ import annotations

from typing import Literal

from rolloutfleet.rules.footprint import job_needs_torch
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.config import OperatorConfig

ImageKind = Literal["spec", "slim", "full"]


def image_kind(job: RolloutJob, config: OperatorConfig) -> ImageKind:
    """``spec`` (the job names its image), ``slim`` (numpy policies, no GPU) or ``full``."""
    if job.spec.image:
        return "spec"
    if config.worker_slim_image is None or job.spec.resources.gpu > 0 or job_needs_torch(job):
        return "full"
    return "slim"


def worker_image(job: RolloutJob, config: OperatorConfig) -> str:
    """The image of the job's worker containers."""
    kind = image_kind(job, config)
    if kind == "spec":
        return str(job.spec.image)
    if kind == "slim":
        return str(config.worker_slim_image)
    return config.worker_image
