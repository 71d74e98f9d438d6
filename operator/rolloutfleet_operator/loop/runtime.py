"""What the operator process keeps in memory: its settings, its API clients, and per job
what must outlive one reconcile. All of it may be lost: a restarted operator starts
empty and reads what it needs back from the cluster (restart records live in the job's
status, pod names are deterministic)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rolloutfleet.league.standings import Standings
from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.loop.api_calls import Api
from rolloutfleet_operator.loop.coalescing import Rounds
from rolloutfleet_operator.loop.observe import PodMemory, resource_version
from rolloutfleet_operator.scaling.scale import Scaling

Key = tuple[str, str]  # (namespace, name) of a RolloutJob


@dataclass
class Owned:
    """A child object the operator keeps for a job: the spec it last applied and when
    (monotonic), and the refusal it last said in an Event (each said once)."""

    sent: tuple[dict[str, Any], float] | None = None
    reported: str = ""


@dataclass
class JobRuntime:
    """In-memory companion of one job."""

    rounds: Rounds = field(default_factory=Rounds)
    memory: PodMemory = field(default_factory=PodMemory)
    beats: dict[int, dict[str, float]] = field(default_factory=dict)  # worker index -> last heartbeat
    evaluation: dict[str, Any] | None = None  # the newest evaluation summary read from Redis (spec.evaluation)
    league: Standings | None = None  # the league's standings read from Redis (spec.league)
    # The last reason reported in an Event, so that each is reported once, not every round.
    reported_invalid: str = ""
    reported_refusal: str = ""
    # The children kept beside the pods (children.keep_owned): the PodDisruptionBudget (not
    # sent again until the watch had time to show it), an external env's Service and the
    # job's NetworkPolicy (applied again when their spec changes or after
    # children.SERVICE_REFRESH_S: they are not watched).
    pdb: Owned = field(default_factory=Owned)
    service: Owned = field(default_factory=Owned)
    network_policy: Owned = field(default_factory=Owned)
    ca_secret: Owned = field(default_factory=Owned)
    # The status this process wrote last, with the uid of the job it was written for.
    # The operator is the only writer of status (peering: one active replica), so this
    # is newer than the watch's copy, which can lag behind our own patches; after a
    # restart it is empty and the job's stored status is read instead.
    written: dict[str, Any] | None = None
    written_for: str = ""
    password: tuple[float, str | None] = (0.0, None)  # (monotonic time read, the Redis password)
    scaling: Scaling | None = None  # spec.autoscaling's autoscaler, its last decision (.scaling)
    redis_users: Any = None  # .redis_users.Isolation: the job's Redis users, as last applied
    # (monotonic time of the last read, the Redis's last ClientLimit read: kept through a failed read)
    clients: tuple[float, Any] = (float("-inf"), None)
    redis_error: str | None = None  # why the operator's last look could not reach the job's Redis (None: it could)
    # Condition type -> the message of the Warning Event last posted for it ("" once True again).
    reported_conditions: dict[str, str] = field(default_factory=dict)


@dataclass
class Runtime:
    config: OperatorConfig
    api: Api
    jobs: dict[Key, JobRuntime] = field(default_factory=dict)
    # namespace -> the newest resourceVersion the pod watch brought there (.observe.Expectation)
    pod_versions: dict[str, int] = field(default_factory=dict)

    def job(self, key: Key) -> JobRuntime:
        return self.jobs.setdefault(key, JobRuntime())

    def note_pod_version(self, namespace: str, version: object) -> None:
        """A pod event from the watch: it has got at least as far as ``version``."""
        number = resource_version(version)
        if number is not None and number > self.pod_versions.get(namespace, -1):
            self.pod_versions[namespace] = number
