"""Observation filters shared through a real Redis: every observation counted once, by
every worker alike, and readable by a learner."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import redis

from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.data.filters import MeanStdFilter
from rolloutfleet.transport.filter_sync import FilterSync, read_filter
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.fleet_helpers import small_job

pytestmark = pytest.mark.integration

KEYS = job_keys("default", "norm")
JOB = RolloutJob.from_dict({"metadata": {"name": "norm"}, "spec": {"env": {"id": "CartPole-v1"}}})


def sync(redis_url: str) -> FilterSync:
    return FilterSync(redis.Redis.from_url(redis_url), KEYS)


def assert_describes(filt: MeanStdFilter, data: np.ndarray) -> None:
    """The filter's statistics are numpy's own over ``data``."""
    assert filt.stats.count == len(data)
    np.testing.assert_allclose(filt.stats.mean, data.mean(axis=0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(filt.stats.var, data.var(axis=0, ddof=1), rtol=1e-9)


def test_two_workers_end_up_with_the_statistics_of_everything_either_saw(redis_url: str) -> None:
    rng = np.random.default_rng(0)
    seen_by_a = rng.normal(5.0, 2.0, (300, 3))
    seen_by_b = rng.normal(-1.0, 0.5, (100, 3))
    a, b = MeanStdFilter((3,)), MeanStdFilter((3,))
    sync_a, sync_b = sync(redis_url), sync(redis_url)
    a(seen_by_a)
    sync_a.push(a)
    assert_describes(a, seen_by_a)
    b(seen_by_b)
    sync_b.push(b)
    sync_a.push(a)  # nothing new from a: it just catches up
    both = np.concatenate([seen_by_a, seen_by_b])
    assert_describes(a, both)
    assert_describes(b, both)
    assert a.buffer.count == b.buffer.count == 0  # deltas are flushed once merged
    learner = read_filter(redis_url, JOB)
    assert learner is not None
    assert_describes(learner, both)
    obs = rng.normal(size=(4, 3))
    np.testing.assert_array_equal(learner(obs, update=False), a(obs, update=False))


def test_concurrent_workers_lose_no_observation(redis_url: str) -> None:
    seen: list[list[np.ndarray]] = [[] for _ in range(4)]

    def worker(index: int) -> None:
        rng = np.random.default_rng(index)
        filt, syncer = MeanStdFilter((2,)), sync(redis_url)
        for _ in range(40):
            obs = rng.normal(index, 1.0 + index, (7, 2))
            seen[index].append(obs)
            filt(obs)
            syncer.push(filt)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    learner = read_filter(redis_url, JOB)
    assert learner is not None
    assert_describes(learner, np.concatenate([o for per_worker in seen for o in per_worker]))


def test_a_replacement_worker_starts_from_the_fleet_statistics(redis_url: str) -> None:
    fresh = MeanStdFilter((3,))
    assert not sync(redis_url).pull(fresh)  # nothing synced yet: nothing to adopt
    old = MeanStdFilter((3,))
    data = np.random.default_rng(1).normal(3.0, 4.0, (50, 3))
    old(data)
    sync(redis_url).push(old)
    replacement = MeanStdFilter((3,))
    assert sync(redis_url).pull(replacement)
    assert_describes(replacement, data)
    assert replacement.buffer.count == 0  # adopted, not counted again on its next push


@pytest.mark.parametrize("foreign", [b"not statistics", "shape"])
def test_a_value_that_is_not_this_jobs_statistics_is_replaced(
    redis_url: str, foreign: bytes | str, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis.Redis.from_url(redis_url)
    if foreign == "shape":  # the job's env changed: statistics of another observation shape
        other = MeanStdFilter((5,))
        other(np.ones((3, 5)))
        FilterSync(client, KEYS).push(other)
    else:
        client.set(KEYS.filters, foreign)
    filt = MeanStdFilter((3,))
    data = np.arange(12.0).reshape(4, 3)
    filt(data)
    sync(redis_url).push(filt)
    assert_describes(filt, data)
    assert KEYS.filters in caplog.text


def test_workers_sampling_with_a_mean_std_filter_share_it(redis_url: str) -> None:
    from rolloutfleet.fleet.worker_transport import WorkerTransport
    from rolloutfleet.rules.worker_config import WorkerConfig

    manifest = small_job("norm", replicas=2).model_dump(by_alias=True)
    manifest["spec"]["sampling"]["observationFilter"] = "meanStd"
    job = RolloutJob.from_dict(manifest)
    runners = [EnvRunner(job, worker_index=i, num_workers=2) for i in range(2)]
    transports = [
        WorkerTransport(WorkerConfig(job=job, worker_index=i, num_workers=2, redis_url=redis_url, metrics_port=0))
        for i in range(2)
    ]
    observed = 0
    for _ in range(3):
        for runner, transport in zip(runners, transports, strict=True):
            runner.sample()
            observed += int(runner.filter.buffer.count)  # type: ignore[union-attr]
            transport.sync_filters(runner)
    fleet = read_filter(redis_url, job)
    assert fleet is not None and fleet.stats.count == observed
    last = runners[-1].filter
    assert last is not None and last.stats.count == observed  # the last to sync holds everything
    # A replacement for worker 0 starts where the fleet is.
    replacement = EnvRunner(job, worker_index=0, num_workers=2)
    assert transports[0].pull_filters(replacement)
    assert replacement.filter is not None and replacement.filter.stats.count == observed


def test_statistics_lost_by_redis_are_seeded_again_from_a_worker(redis_url: str) -> None:
    rng = np.random.default_rng(2)
    filt, syncer = MeanStdFilter((3,)), sync(redis_url)
    seen = [rng.normal(1.0, 2.0, (64, 3)) for _ in range(5)]
    for obs in seen[:4]:
        filt(obs)
        syncer.push(filt)
    redis.Redis.from_url(redis_url).delete(KEYS.filters)  # e.g. Redis restarted without persistence
    filt(seen[4])
    syncer.push(filt)
    everything = np.concatenate(seen)
    assert_describes(filt, everything)  # not just the last fragment
    learner = read_filter(redis_url, JOB)
    assert learner is not None
    assert_describes(learner, everything)


def test_a_nan_observation_of_one_worker_does_not_reach_the_fleet(redis_url: str) -> None:
    rng = np.random.default_rng(4)
    a, b = MeanStdFilter((3,)), MeanStdFilter((3,))
    seen_by_a = rng.normal(0.0, 1.0, (50, 3))
    poisoned = seen_by_a.copy()
    poisoned[7, 2] = np.nan
    a(poisoned)
    sync(redis_url).push(a)
    seen_by_b = rng.normal(3.0, 1.0, (50, 3))
    out = b(seen_by_b)
    sync(redis_url).push(b)
    assert np.isfinite(b(seen_by_b, update=False)).all() and np.isfinite(out).all()
    kept = np.concatenate([np.delete(seen_by_a, 7, axis=0), seen_by_b])
    learner = read_filter(redis_url, JOB)
    assert learner is not None
    assert_describes(learner, kept)
    assert a.quarantined == 1 and b.quarantined == 0


@pytest.mark.parametrize("bad", ["mean", "m2", "count"])
def test_non_finite_statistics_in_redis_are_rebuilt_not_adopted(
    redis_url: str, bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    from rolloutfleet.data.filters import RunningStat
    from rolloutfleet.transport.filter_sync import encode_stat

    # What an older version left behind after one NaN observation.
    stat = RunningStat((3,), 10.0, np.zeros(3), np.ones(3))
    if bad == "count":
        stat.count = float("nan")
    else:
        getattr(stat, bad)[1] = np.nan
    redis.Redis.from_url(redis_url).set(KEYS.filters, encode_stat(stat))
    rng = np.random.default_rng(5)
    fresh = MeanStdFilter((3,))
    syncer = sync(redis_url)
    assert not syncer.pull(fresh)  # not adopted
    data = rng.normal(1.0, 2.0, (40, 3))
    fresh(data)
    syncer.push(fresh)
    assert_describes(fresh, data)  # rebuilt from this worker's clean statistics
    learner = read_filter(redis_url, JOB)
    assert learner is not None
    assert_describes(learner, data)
    assert syncer.rebuilt == 1
    assert "non-finite" in caplog.text


def test_one_worker_with_nan_observations_leaves_the_other_workers_clean(redis_url: str) -> None:
    """The issue's reproduction: with meanStd, one NaN from one sub-env of one worker used to
    make almost every row of every worker NaN, and of any later fleet on the same Redis."""
    from rolloutfleet.data.batch import nonfinite_rows
    from rolloutfleet.fleet.worker_transport import WorkerTransport
    from rolloutfleet.rules.worker_config import WorkerConfig

    def manifest(nan_every: int) -> RolloutJob:
        return RolloutJob.from_dict(
            {
                "metadata": {"name": "norm"},
                "spec": {
                    "env": {"entryPoint": "tests.unit.sampling.poison_envs:make_nan_env", "numEnvs": 2,
                            "config": {"nan_every": nan_every}},
                    "sampling": {"rolloutFragmentLength": 30, "observationFilter": "meanStd", "seed": 0},
                },
            }
        )  # fmt: skip

    job = manifest(nan_every=7)  # worker 0, sub-env 0: a NaN every 7th step
    runners = [EnvRunner(job, worker_index=i, num_workers=2) for i in range(2)]
    transports = [
        WorkerTransport(WorkerConfig(job=job, worker_index=i, num_workers=2, redis_url=redis_url, metrics_port=0))
        for i in range(2)
    ]
    bad_rows = [0, 0]
    for _ in range(4):
        for i, (runner, transport) in enumerate(zip(runners, transports, strict=True)):
            batch = runner.sample()
            bad_rows[i] += nonfinite_rows(batch)[0]
            transport.sync_filters(runner)
    assert bad_rows[1] == 0  # the clean worker's rows stay clean
    quarantined = runners[0].filter.quarantined  # type: ignore[union-attr]
    assert quarantined > 0 and bad_rows[0] > 0
    # Only the poisoned sub-env's own rows carry its NaNs: obs or new_obs, at most 2 per NaN.
    assert bad_rows[0] <= 2 * quarantined
    fleet = read_filter(redis_url, job)
    assert fleet is not None and fleet.stats.is_finite()
    # A new fleet on the same Redis, with a clean env, samples clean rows.
    later = EnvRunner(manifest(nan_every=10**9), worker_index=1, num_workers=1)
    later_transport = WorkerTransport(
        WorkerConfig(job=job, worker_index=1, num_workers=1, redis_url=redis_url, metrics_port=0)
    )
    assert later_transport.pull_filters(later)
    assert nonfinite_rows(later.sample()) == (0, 0)
