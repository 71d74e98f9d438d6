"""Every Redis key, stream and group name of a job, derived in one place (pure: no client).

All keys of a job share the hash tag ``{<namespace>/<job>}`` (one Redis Cluster slot: the
weights' Lua script and MULTI blocks touch several); a multi-agent job's batch stream and
weights version are per policy::

    >>> job_keys("default", "cartpole").batches
    'rolloutfleet:{default/cartpole}:batches'
    >>> job_keys("default", "tag", policy="red").weights_version
    'rolloutfleet:{default/tag}:weights:red:version'

With ``spec.redis.shards > 1`` each batch stream (with its dead letters, backpressure and
learners) has a tag of its own, ``{<namespace>/<job>/<shard>.<n>}``, so shards can sit on
different masters; one shard keeps the names above. Why, and how ``<n>`` is chosen:
docs/guides/redis-cluster.md.
"""

from __future__ import annotations

import binascii
import re
from dataclasses import dataclass, replace

from rolloutfleet.spec.sections.redis_spec import MAX_SHARDS

PREFIX = "rolloutfleet"
DEFAULT_GROUP = "learner"
"""The consumer group learners join unless told otherwise."""

# Kubernetes names (RFC 1123 labels / subdomains) never contain braces, slashes or colons,
# which is what keeps the key grammar unambiguous; anything else is a caller's mistake.
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
_BATCHES = re.compile(r"^rolloutfleet:\{([^/{}]+)/([^/{}]+)(?:/(\d+)\.\d+)?\}:batches(?::([^/{}:]+))?$")
SLOTS = 16384
"""Hash slots of a Redis Cluster."""
# Same grammar as spec.multiAgent.policies' keys (checked there with a field name).
_POLICY = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class JobKeys:
    """The Redis names of one RolloutJob."""

    namespace: str
    job: str
    policy: str | None = None
    """A multi-agent job's policy id: batches and weights are that policy's."""
    shard_index: int = 0
    shards: int = 1
    """The batch stream is shard ``shard_index`` of ``shards`` (see the module doc)."""

    @property
    def tag(self) -> str:
        return f"{PREFIX}:{{{self.namespace}/{self.job}}}"

    @property
    def stream_tag(self) -> str:
        """The tag of the batch stream and its companions: the job's with one shard."""
        if self.shards == 1:
            return self.tag
        suffix = _shard_suffix(f"{self.namespace}/{self.job}", self.shard_index, self.shards)
        return f"{PREFIX}:{{{self.namespace}/{self.job}/{self.shard_index}.{suffix}}}"

    def shard(self, index: int, shards: int) -> JobKeys:
        """These keys with the batch stream of shard ``index`` of ``shards``."""
        if not 1 <= shards <= MAX_SHARDS or not 0 <= index < shards:
            raise ValueError(f"shard {index} of {shards}: need 0 <= shard < shards <= {MAX_SHARDS}")
        return replace(self, shard_index=index, shards=shards)

    def all_shards(self, shards: int) -> list[JobKeys]:
        """The keys of every shard of a job with ``shards`` batch streams."""
        return [self.shard(index, shards) for index in range(shards)]

    @property
    def shards_key(self) -> str:
        """How many batch streams the job's workers write (a decimal integer; absent: 1 or
        the Redis's default). Workers set it; learners follow it."""
        return f"{self.tag}:shards" if self.policy is None else f"{self.tag}:shards:{self.policy}"

    @property
    def batches(self) -> str:
        """The stream of encoded batches (XADD by workers, XREADGROUP by learners)."""
        tag = self.stream_tag
        return f"{tag}:batches" if self.policy is None else f"{tag}:batches:{self.policy}"

    @property
    def weights_prefix(self) -> str:
        """What every weights key of this job (and policy) starts with."""
        return f"{self.tag}:weights:" if self.policy is None else f"{self.tag}:weights:{self.policy}:"

    @property
    def dead_letters(self) -> str:
        """Entries no consumer could decode, with the reason."""
        return f"{self.stream_tag}:dead-letters"

    @property
    def columns(self) -> str:
        """Hash of the columns the workers declare for their batches: name -> JSON dtype and
        row shape (:mod:`rolloutfleet.transport.declared_columns`); what a learner judges against."""
        return f"{self.tag}:columns" if self.policy is None else f"{self.tag}:columns:{self.policy}"

    @property
    def filters(self) -> str:
        """The fleet's observation-filter statistics (codec tensors: count, mean, m2)."""
        return f"{self.tag}:filters" if self.policy is None else f"{self.tag}:filters:{self.policy}"

    @property
    def backpressure(self) -> str:
        """Hash written by workers while ``block`` backpressure has held them for over a
        second: which group holds them back, since when (expires soon after the wait ends)."""
        tag = self.stream_tag
        return f"{tag}:backpressure" if self.policy is None else f"{tag}:backpressure:{self.policy}"

    @property
    def room(self) -> str:
        """Stream (one entry kept) a learner adds to when it frees room in the batch stream (an
        ack) or starts reading: workers waiting for room (``block``) block on it with XREAD
        instead of polling the batch stream, so a waiting worker costs Redis O(1)."""
        tag = self.stream_tag
        return f"{tag}:room" if self.policy is None else f"{tag}:room:{self.policy}"

    @property
    def learners(self) -> str:
        """Hash: consumer group -> Redis time (ms) a BatchConsumer of it last asked for entries."""
        tag = self.stream_tag
        return f"{tag}:learners" if self.policy is None else f"{tag}:learners:{self.policy}"

    @property
    def appetite(self) -> str:
        """Hash: ``<group>/<consumer>`` -> Redis time (ms) and JSON of the consumer's starved
        time and rows (:mod:`rolloutfleet.rules.autoscale_signals`): what the autoscaler sizes the fleet by."""
        return f"{self.tag}:appetite" if self.policy is None else f"{self.tag}:appetite:{self.policy}"

    @property
    def heartbeats(self) -> str:
        """Hash: worker index -> JSON of the worker's latest sampling figures."""
        return f"{self.tag}:heartbeats"

    @property
    def global_step(self) -> str:
        """The learner's global step (a decimal integer): exploration schedules follow it. One per job."""
        return f"{self.tag}:global-step"

    @property
    def weights_version(self) -> str:
        """``"<seq_no> <chunks> <bytes>"`` of the current weights: workers read it when
        :attr:`weights_news` announces a version, and every half minute besides."""
        return f"{self.weights_prefix}version"

    @property
    def weights_news(self) -> str:
        """The pub/sub channel on which a new version is announced (its version line) the moment
        it becomes current: workers read the version key only on news, not every fragment."""
        return f"{self.weights_prefix}news"

    @property
    def weights_counter(self) -> str:
        """INCR counter handing out weight sequence numbers."""
        return f"{self.weights_prefix}counter"

    @property
    def weights_held(self) -> str:
        """The highest version a worker held when it saw the published version go back or
        vanish (Redis lost its state): the learner's next version goes on above it."""
        return f"{self.weights_prefix}held"

    @property
    def weights_model(self) -> str:
        """JSON of the model's weight names, shapes and dtypes, as the workers built it: what
        a learner's ``WeightPublisher`` checks a version against before publishing it."""
        return f"{self.weights_prefix}model"

    def weights_chunk(self, seq_no: int, index: int) -> str:
        """Chunk ``index`` of the encoded weights of version ``seq_no`` (immutable once written)."""
        return f"{self.weights_prefix}{seq_no}:{index}"


def job_keys(namespace: str, job: str, policy: str | None = None) -> JobKeys:
    """The keys of job ``namespace/job`` (of one of its policies); raises ``ValueError`` for
    names Kubernetes would refuse and for policy ids the spec would refuse."""
    for field, value in (("namespace", namespace), ("job", job)):
        if not _NAME.match(value):
            raise ValueError(
                f"{field} {value!r} is not a Kubernetes name (letters, digits, '-', '.', '_'; "
                "starting and ending with a letter or digit)"
            )
    if policy is not None and not _POLICY.match(policy):
        raise ValueError(f"policy id {policy!r} must start with a letter and hold only letters, digits, '-', '_', '.'")
    return JobKeys(namespace, job, policy)


def key_slot(key: str) -> int:
    """The Redis Cluster hash slot of ``key`` (CRC16-XMODEM of its hash tag, mod 16384)."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key.encode(), 0) % SLOTS


def _shard_suffix(job: str, index: int, shards: int) -> int:
    """The smallest ``n`` putting ``{job/index.n}`` in the middle half of slot range ``index``."""
    width = SLOTS / shards
    low, high = index * width + width / 4, (index + 1) * width - width / 4
    n = 0
    while not low <= key_slot(f"{{{job}/{index}.{n}}}") < high:
        n += 1
    return n


def parse_stream_key(key: str | bytes) -> tuple[str, str, str | None] | None:
    """``(namespace, job, policy or None)`` of a batch stream key, or ``None`` for any other key."""
    text = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
    match = _BATCHES.match(text)
    return (match.group(1), match.group(2), match.group(4)) if match else None


def parse_shard(key: str | bytes) -> int:
    """The shard index of a batch stream key (0 for a job's only stream)."""
    text = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
    match = _BATCHES.match(text)
    return int(match.group(3)) if match and match.group(3) else 0


def parse_batches_key(key: str | bytes) -> tuple[str, str] | None:
    """``(namespace, job)`` of a batch stream key (a policy's too), or ``None`` for any other key."""
    parsed = parse_stream_key(key)
    return None if parsed is None else (parsed[0], parsed[1])


BATCHES_PATTERN = f"{PREFIX}:{{*}}:batches"
"""SCAN pattern matching every single-agent job's batch stream."""
POLICY_BATCHES_PATTERN = f"{PREFIX}:{{*}}:batches:*"
"""SCAN pattern matching every policy stream of multi-agent jobs."""
