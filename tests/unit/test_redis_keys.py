"""Key naming: one hash tag per job, names Kubernetes would refuse are refused."""

from __future__ import annotations

import pytest

from rolloutfleet.redis_keys import BATCHES_PATTERN, job_keys, parse_batches_key


def test_every_key_of_a_job_shares_one_hash_tag() -> None:
    keys = job_keys("team-a", "cartpole")
    names = [keys.batches, keys.dead_letters, keys.heartbeats, keys.weights_version, keys.weights_counter,
             keys.weights_chunk(3, 1)]  # fmt: skip
    assert all(name.startswith("rolloutfleet:{team-a/cartpole}:") for name in names)
    assert len(set(names)) == len(names)
    assert keys.batches == "rolloutfleet:{team-a/cartpole}:batches"


def test_jobs_do_not_collide_across_namespaces() -> None:
    assert job_keys("a", "b-c").batches != job_keys("a-b", "c").batches


@pytest.mark.parametrize(("namespace", "job", "field"), [("", "x", "namespace"), ("ns", "a/b", "job"),
                                                         ("ns", "x}", "job"), ("n s", "x", "namespace")])  # fmt: skip
def test_names_kubernetes_would_refuse_are_refused(namespace: str, job: str, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field} "):
        job_keys(namespace, job)


def test_parse_batches_key_round_trips_and_ignores_other_keys() -> None:
    keys = job_keys("default", "pong")
    assert parse_batches_key(keys.batches) == ("default", "pong")
    assert parse_batches_key(keys.batches.encode()) == ("default", "pong")
    assert parse_batches_key(keys.heartbeats) is None
    assert BATCHES_PATTERN == "rolloutfleet:{*}:batches"
