"""``spec.autoscaling``: the fleet follows the learner's appetite within bounds, down to zero.

With it set, the operator (and ``rolloutfleet run``) own the number of workers: the rule is
:mod:`rolloutfleet.rules.autoscaler`, the signals :mod:`rolloutfleet.transport.appetite`.
``spec.replicas`` is then the size to start from (clamped to the bounds); a later change
of it (``kubectl scale``, an HPA) is a one-off nudge the autoscaler starts again from, not a
fixed size (docs/autoscaling.md). ``minReplicas: 0`` lets a fleet with no learner reading go
to zero workers after ``idleSeconds``.

Contradictions are refused naming the field: ``minReplicas`` above ``maxReplicas``, and
``redis.backpressure: dropOldest`` (workers never wait then, so oversupply is invisible).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from rolloutfleet.spec.model_base import SpecModel, SubfieldError

MAX_IDLE_SECONDS = 7 * 24 * 3600
MAX_WINDOW_SECONDS = 3600


class AutoscalingSpec(SpecModel):
    """Bounds and pace of the autoscaler (docs/autoscaling.md)."""

    min_replicas: int = Field(default=0, ge=0)
    """Fewest workers; 0 lets an idle fleet (no learner reading) stop every worker."""
    max_replicas: int = Field(ge=1)
    """Most workers."""
    idle_seconds: int = Field(default=300, ge=1, le=MAX_IDLE_SECONDS)
    """No learner group has read for this long: go to ``minReplicas`` (back up at the next read)."""
    window_seconds: int = Field(default=60, ge=1, le=MAX_WINDOW_SECONDS)
    """Signals are averaged over this long, and measured again this long after each change."""
    scale_down_seconds: int = Field(default=120, ge=0, le=MAX_WINDOW_SECONDS)
    """Scale-down stabilization: the fleet shrinks only to the largest size recommended within this long."""
    starved_ratio: float = Field(default=0.1, gt=0, le=0.9)
    """Scale up while the learner waits for rows more than this share of its time."""
    blocked_ratio: float = Field(default=0.25, gt=0, le=0.9)
    """Scale down while workers wait on backpressure more than this share of their time."""
    headroom: float = Field(default=0.1, ge=0, le=1)
    """Workers sized for the learner's appetite times (1 + headroom)."""

    @model_validator(mode="after")
    def _bounds_in_order(self) -> AutoscalingSpec:
        if self.min_replicas > self.max_replicas:
            raise SubfieldError("minReplicas", f"must be <= maxReplicas ({self.max_replicas}), got {self.min_replicas}")
        return self

    def clamp(self, replicas: int) -> int:
        """``replicas`` within the bounds.

        >>> AutoscalingSpec(max_replicas=4).clamp(9), AutoscalingSpec(max_replicas=4, min_replicas=2).clamp(0)
        (4, 2)
        """
        return max(self.min_replicas, min(self.max_replicas, replicas))


def check_autoscaling(autoscaling: AutoscalingSpec | None, backpressure: str) -> None:
    """The job-level contradiction: autoscaling sees oversupply only as workers blocked by ``block`` backpressure."""
    if autoscaling is not None and backpressure != "block":
        raise SubfieldError(
            "redis.backpressure",
            f"must be 'block' with spec.autoscaling (got {backpressure!r}): the autoscaler scales down on "
            "workers waiting for room, which 'dropOldest' never do",
        )
