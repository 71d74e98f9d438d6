"""Every Redis key, stream and group name of a job, derived in one place (pure: no client).

All keys of a job share the hash tag ``{<namespace>/<job>}``, so a Redis Cluster keeps
them in one slot (the weights' Lua script and MULTI blocks touch several of them)::

    >>> keys = job_keys("default", "cartpole")
    >>> keys.batches
    'rolloutfleet:{default/cartpole}:batches'
    >>> keys.weights_chunk(7, 0)
    'rolloutfleet:{default/cartpole}:weights:7:0'
    >>> parse_batches_key(keys.batches)
    ('default', 'cartpole')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "rolloutfleet"
DEFAULT_GROUP = "learner"
"""The consumer group learners join unless told otherwise."""

# Kubernetes names (RFC 1123 labels / subdomains) never contain braces, slashes or colons,
# which is what keeps the key grammar unambiguous; anything else is a caller's mistake.
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
_BATCHES = re.compile(r"^rolloutfleet:\{([^/{}]+)/([^/{}]+)\}:batches$")


@dataclass(frozen=True)
class JobKeys:
    """The Redis names of one RolloutJob."""

    namespace: str
    job: str

    @property
    def tag(self) -> str:
        return f"{PREFIX}:{{{self.namespace}/{self.job}}}"

    @property
    def batches(self) -> str:
        """The stream of encoded batches (XADD by workers, XREADGROUP by learners)."""
        return f"{self.tag}:batches"

    @property
    def dead_letters(self) -> str:
        """Entries no consumer could decode, with the reason."""
        return f"{self.tag}:dead-letters"

    @property
    def heartbeats(self) -> str:
        """Hash: worker index -> JSON of the worker's latest sampling figures."""
        return f"{self.tag}:heartbeats"

    @property
    def weights_version(self) -> str:
        """``"<seq_no> <chunks> <bytes>"`` of the current weights; the only key workers poll."""
        return f"{self.tag}:weights:version"

    @property
    def weights_counter(self) -> str:
        """INCR counter handing out weight sequence numbers."""
        return f"{self.tag}:weights:counter"

    def weights_chunk(self, seq_no: int, index: int) -> str:
        """Chunk ``index`` of the encoded weights of version ``seq_no`` (immutable once written)."""
        return f"{self.tag}:weights:{seq_no}:{index}"


def job_keys(namespace: str, job: str) -> JobKeys:
    """The keys of job ``namespace/job``; raises ``ValueError`` for names Kubernetes would refuse."""
    for field, value in (("namespace", namespace), ("job", job)):
        if not _NAME.match(value):
            raise ValueError(
                f"{field} {value!r} is not a Kubernetes name (letters, digits, '-', '.', '_'; "
                "starting and ending with a letter or digit)"
            )
    return JobKeys(namespace, job)


def parse_batches_key(key: str | bytes) -> tuple[str, str] | None:
    """``(namespace, job)`` of a batch stream key, or ``None`` for any other key."""
    text = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
    match = _BATCHES.match(text)
    return (match.group(1), match.group(2)) if match else None


BATCHES_PATTERN = f"{PREFIX}:{{*}}:batches"
"""SCAN pattern matching every job's batch stream."""
