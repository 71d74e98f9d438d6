"""The per-job ACL rules (pure): which keys each user's patterns reach, judged with the
glob Redis uses (``*`` any run of characters, ``?`` one: what fnmatchcase does for these
patterns, which hold no ``[`` or ``\\``), and which commands they allow."""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest

from rolloutfleet.transport.redis.acl import job_users, password_hash, user_name
from rolloutfleet.transport.redis.keys import JobKeys, job_keys


def patterns(rules: tuple[str, ...], mode: str) -> list[str]:
    """The key patterns of ``rules`` granting ``mode`` (``R`` or ``W``)."""
    found = []
    for rule in rules:
        if rule.startswith("~"):
            found.append(rule[1:])
        elif rule.startswith("%") and "~" in rule and mode in rule[1 : rule.index("~")]:
            found.append(rule[rule.index("~") + 1 :])
    return found


def allowed(rules: tuple[str, ...], key: str, mode: str) -> bool:
    return any(fnmatchcase(key, p) for p in patterns(rules, mode))


def every_key(keys: JobKeys) -> list[str]:
    return [keys.batches, keys.dead_letters, keys.backpressure, keys.learners, keys.appetite, keys.columns,
            keys.filters, keys.heartbeats, keys.global_step, keys.shards_key, keys.weights_version,
            keys.weights_counter, keys.weights_held, keys.weights_model, keys.weights_chunk(3, 0)]  # fmt: skip


def variants(namespace: str, job: str) -> list[JobKeys]:
    """The job's keys, its policies' and its shards' (each shard under its own hash tag)."""
    plain, red = job_keys(namespace, job), job_keys(namespace, job, policy="red")
    return [plain, red, *plain.all_shards(4), *red.all_shards(3)]


def test_same_job_name_in_two_namespaces_gets_two_users_that_never_meet() -> None:
    a, b = job_users("team-a", "cartpole"), job_users("team-b", "cartpole")
    assert len({a.worker.name, a.learner.name, b.worker.name, b.learner.name}) == 4
    for keys in variants("team-b", "cartpole") + variants("team-a", "cartpole2") + variants("team", "a-cartpole"):
        for key in every_key(keys):
            for user in (a.worker, a.learner):
                assert not allowed(user.keys, key, "R") and not allowed(user.keys, key, "W"), (user.name, key)


def test_the_learner_reaches_every_key_of_its_job_and_its_shards() -> None:
    learner = job_users("team-a", "cartpole").learner
    for keys in variants("team-a", "cartpole"):
        for key in every_key(keys):
            assert allowed(learner.keys, key, "R") and allowed(learner.keys, key, "W"), key


def test_a_worker_writes_its_streams_and_state_but_only_reads_weights_and_the_global_step() -> None:
    worker = job_users("team-a", "cartpole").worker
    for keys in variants("team-a", "cartpole"):
        for key in (keys.batches, keys.backpressure, keys.filters, keys.columns, keys.heartbeats, keys.shards_key,
                    keys.weights_held, keys.weights_model):  # fmt: skip
            assert allowed(worker.keys, key, "W") and allowed(worker.keys, key, "R"), key
        for key in (keys.weights_version, keys.weights_chunk(7, 2), keys.weights_counter, keys.global_step,
                    keys.learners):  # fmt: skip
            assert allowed(worker.keys, key, "R") and not allowed(worker.keys, key, "W"), key
        for key in (keys.dead_letters, keys.appetite):  # the learners' own
            assert not allowed(worker.keys, key, "R") and not allowed(worker.keys, key, "W"), key


def test_neither_user_may_run_what_touches_other_jobs_or_the_server() -> None:
    users = job_users("team-a", "cartpole")
    for user in (users.worker, users.learner):
        assert not any(c.startswith("+@") for c in user.commands)  # named commands only: no category
        for forbidden in ("flushall", "flushdb", "config", "keys", "scan", "debug", "acl", "monitor", "shutdown",
                          "client|list", "client|kill", "module", "swapdb", "migrate", "sort"):  # fmt: skip
            assert f"+{forbidden}" not in user.commands, (user.name, forbidden)
    assert "+xreadgroup" in users.learner.commands and "+xreadgroup" not in users.worker.commands
    assert "+xadd" in users.worker.commands and "+xack" not in users.worker.commands


def test_setuser_args_make_the_user_exactly_so_with_hashes_never_the_password() -> None:
    worker = job_users("ns", "job").worker
    args = worker.setuser_args([password_hash("s3cret/#?@%")])
    assert args[:3] == [worker.name, "reset", "on"]
    assert args[3] == "#" + password_hash("s3cret/#?@%") and len(args[3]) == 65
    assert not any("s3cret" in arg for arg in args)
    assert args.index("-@all") < args.index("+xadd")  # commands granted after all were taken away
    with pytest.raises(ValueError, match="at least one password"):
        worker.setuser_args([])


def test_user_names_refuse_what_kubernetes_would() -> None:
    with pytest.raises(ValueError, match="not a Kubernetes name"):
        user_name("team a", "job", "worker")
