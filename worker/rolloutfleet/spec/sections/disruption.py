"""How a RolloutJob lives on a shared cluster: ``spec.disruption`` (the PodDisruptionBudget's
``maxUnavailable``, how long a worker waits on a lost node) and ``spec.template.metadata``
(labels and annotations for the worker pods). Read by the operator; a local run ignores them.

Label and annotation keys follow Kubernetes' rules (an optional DNS-subdomain prefix and
``/``, then a name of at most 63 characters of ``[A-Za-z0-9-_.]`` starting and ending
alphanumeric); label values are empty or such a name. The operator's own labels
(``rolloutfleet.io/*`` and the ``app.kubernetes.io/*`` ones it sets) cannot be given here:
pods are found and owned by them.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from rolloutfleet.spec.model_base import SpecModel

RESERVED_PREFIX = "rolloutfleet.io/"
RESERVED_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/component", "app.kubernetes.io/managed-by")
"""Labels the operator sets on every worker pod (``rolloutfleet_operator.children.pods.WORKER_LABELS``)."""
MAX_NODE_LOSS_SECONDS = 3600
MAX_LABELS = 64
MAX_ANNOTATIONS = 64
MAX_ANNOTATIONS_BYTES = 256 * 1024  # the API server's limit on a pod's annotations, all together

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PERCENT = re.compile(r"^(100|[1-9]?[0-9])%$")


def _check_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise ValueError(f"key {key!r}: the prefix before '/' must be a DNS subdomain (lowercase, at most 253)")
    if not _NAME.match(name):
        raise ValueError(
            f"key {key!r}: the name must be at most 63 characters of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    if key.startswith(RESERVED_PREFIX) or key in RESERVED_LABELS:
        raise ValueError(f"key {key!r} is set by the operator (rolloutfleet.io/* and {', '.join(RESERVED_LABELS)})")


class DisruptionSpec(SpecModel):
    """Disruptions (evictions, drains, preemptions, lost nodes) are not failures: how the
    operator bounds them and how fast it replaces workers on a lost node."""

    max_unavailable: int | str = "25%"
    """The job's PodDisruptionBudget (``<job>-workers``): at most this many workers (or this
    percentage of ``replicas``, rounded up) may be evicted at once (a drain waits for the
    rest). 0 blocks voluntary evictions altogether."""
    node_loss_seconds: int = Field(default=30, ge=0, le=MAX_NODE_LOSS_SECONDS)
    """A worker on a node that stops reporting (``not-ready``/``unreachable``) is replaced on
    another node after this long (its ``tolerationSeconds``; Kubernetes' default is 300)."""

    @field_validator("max_unavailable", mode="before")
    @classmethod
    def _count_or_percent(cls, value: Any) -> Any:
        if value is None:
            return cls.model_fields["max_unavailable"].default  # a null is pruned (the default applies)
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # the API server stores 2.0 as 2
        count = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        if not count and not (isinstance(value, str) and _PERCENT.match(value)):
            raise ValueError(f"must be a count >= 0 or a percentage from '0%' to '100%', got {value!r}")
        return value


class PodMetadataSpec(SpecModel):
    """Labels and annotations added to every worker pod (cost attribution, Kueue pod groups,
    sidecar opt-outs). Changing them replaces the pods, a few at a time, as a Deployment does."""

    labels: dict[str, str] = Field(default_factory=dict, max_length=MAX_LABELS)
    annotations: dict[str, str] = Field(default_factory=dict, max_length=MAX_ANNOTATIONS)

    @field_validator("labels")
    @classmethod
    def _label_syntax(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            _check_key(key)
            if label and not _NAME.match(label):
                raise ValueError(
                    f"value {label!r} of {key!r}: at most 63 characters of letters, digits, '-', '_' or '.', "
                    "starting and ending with a letter or digit (or empty)"
                )
        return value

    @field_validator("annotations")
    @classmethod
    def _annotation_syntax(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            _check_key(key)
        size = sum(len(k.encode()) + len(v.encode()) for k, v in value.items())
        if size > MAX_ANNOTATIONS_BYTES:
            raise ValueError(f"{size} bytes in all; Kubernetes allows {MAX_ANNOTATIONS_BYTES}")
        return value


class PodTemplateSpec(SpecModel):
    """What of the worker pods' template a job may set beyond its other fields."""

    metadata: PodMetadataSpec = Field(default_factory=PodMetadataSpec)
