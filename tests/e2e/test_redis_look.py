"""The operator's own look at a job's Redis, on a real API server. A job sized past its Redis's
``maxclients``: the operator reads the limit in force from Redis (``INFO clients``) and says
so in the job's ``RedisConnectionsFit`` condition and in a Warning Event; a job scaled back
inside it is told so. The workers' pods stay unschedulable (a CPU request no node has), so
the verdict is the operator's judgement of the spec against Redis's own answer, not a race
with connecting workers. A job whose Redis cannot be reached: its workers are never ready
and write no heartbeat, so the reason (connection refused) is in ``RedisReachable`` and a
Warning Event within a minute."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from tests.e2e.cluster_kit import OperatorFactory, wait_for
from tests.e2e.jobs import Jobs, job_manifest

MAXCLIENTS = 9  # four workers fit (2 connections each), five do not


def fit(jobs: Jobs, name: str, kind: str = "RedisConnectionsFit") -> dict[str, Any] | None:
    found = [c for c in jobs.status(name).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else None


def test_a_job_past_the_redis_maxclients_is_warned_in_its_status_and_events(
    operators: OperatorFactory, jobs: Jobs, namespace: str, core: client.CoreV1Api, redis_server: EmbeddedRedis
) -> None:
    binary = redis_server.executable  # the session's server: redis-server was found (or the run failed)
    server = EmbeddedRedis(executable=binary, extra_args=("--maxclients", str(MAXCLIENTS))).start()
    try:
        operators.start()
        jobs.create(job_manifest("crowd", server.url, replicas=5, resources={"cpu": "1000"}))
        over = wait_for(lambda: (c := fit(jobs, "crowd")) and c["status"] == "False" and c, 90, jobs.describe)
        assert over["reason"] == "OverMaxClients", over
        assert over["message"].startswith(f"5 workers x 2 connections = 10, and 0 other clients, pass the Redis's maxclients of {MAXCLIENTS}")  # fmt: skip
        assert all(p["status"]["phase"] == "Pending" for p in jobs.pods("crowd").values())  # none connected

        def warned() -> list[client.CoreV1Event]:
            found = core.list_namespaced_event(namespace, field_selector="reason=OverMaxClients").items
            return [e for e in found if e.involved_object.name == "crowd"]

        events = wait_for(warned, 30, jobs.describe)
        assert events[0].type == "Warning" and events[0].message == over["message"] and events[0].count in (None, 1)

        jobs.patch("crowd", {"replicas": 4})
        within = wait_for(lambda: (c := fit(jobs, "crowd")) and c["status"] == "True" and c, 90, jobs.describe)
        assert within["reason"] == "WithinMaxClients" and within["message"].startswith("4 workers x 2 connections = 8")
        assert len(warned()) == 1  # one Event for the one warning, not one per round
    finally:
        server.stop()


def test_a_job_whose_redis_cannot_be_reached_says_why_in_its_status_and_events(
    operators: OperatorFactory, jobs: Jobs, namespace: str, core: client.CoreV1Api, redis_server: EmbeddedRedis
) -> None:
    gone = EmbeddedRedis(executable=redis_server.executable).start()
    url = gone.url  # a port nothing listens on any more
    gone.stop()
    operators.start()
    jobs.create(job_manifest("lost", url, replicas=1))
    down = wait_for(
        lambda: (c := fit(jobs, "lost", "RedisReachable")) and c["status"] == "False" and c, 60, jobs.describe
    )
    assert down["reason"] == "RedisUnreachable", down
    assert down["message"].startswith(f"redis at 127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}: connection refused")

    def warned() -> list[client.CoreV1Event]:
        found = core.list_namespaced_event(namespace, field_selector="reason=RedisUnreachable").items
        return [e for e in found if e.involved_object.name == "lost"]

    events = wait_for(warned, 30, jobs.describe)
    assert events[0].type == "Warning" and events[0].message == down["message"]
