"""Weights through a real redis-server: versions, cheap polls, atomicity under concurrent
publishing and reading, and 100 MB of weights."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import redis
import torch

from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WeightPublisher, WeightSubscriber

pytestmark = pytest.mark.integration


def test_torch_module_round_trip_and_polls_only_newer(redis_url: str) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
    publisher = WeightPublisher(redis_url, "cartpole")
    subscriber = WeightSubscriber(redis_url, "cartpole")
    assert subscriber.poll() is None  # nothing published yet
    assert publisher.publish(model) == 1
    update = subscriber.poll()
    assert update is not None and update.seq_no == 1
    for name, tensor in model.state_dict().items():
        np.testing.assert_array_equal(update.weights[name], tensor.numpy())
        assert update.weights[name].flags.writeable
    assert update.weights["1.num_batches_tracked"].shape == ()  # 0-d tensors survive
    assert subscriber.poll() is None  # not newer: no download
    model.load_state_dict({k: torch.as_tensor(v) for k, v in update.weights.items()})  # loads without warnings
    assert publisher.publish({"w": np.ones(3)}) == 2
    assert subscriber.poll().seq_no == 2  # type: ignore[union-attr]


def test_old_versions_expire_and_the_current_one_does_not(redis_url: str) -> None:
    keys = job_keys("default", "cartpole")
    client = redis.Redis.from_url(redis_url)
    publisher = WeightPublisher(redis_url, "cartpole", grace_s=5)
    publisher.publish({"w": np.ones(3)})
    assert client.ttl(keys.weights_chunk(1, 0)) == -1  # current: permanent
    publisher.publish({"w": np.ones(3)})
    assert 0 < client.ttl(keys.weights_chunk(1, 0)) <= 5
    assert client.ttl(keys.weights_chunk(2, 0)) == -1
    assert client.get(keys.weights_version).split()[0] == b"2"


def test_a_slower_publisher_never_moves_the_version_back(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = job_keys("default", "cartpole")
    client.set(keys.weights_counter, 0)
    publisher = WeightPublisher(redis_url, "cartpole")
    client.set(keys.weights_version, "5 1 64")  # a newer version published by someone else meanwhile
    assert publisher.publish({"w": np.ones(2)}) == 1
    assert client.get(keys.weights_version) == b"5 1 64"


def test_readers_never_see_a_mix_of_two_versions(redis_url: str) -> None:
    # Several chunks per version, every tensor filled with the version's seq no.
    publisher = WeightPublisher(redis_url, "cartpole", chunk_bytes=4096, grace_s=1)
    stop = threading.Event()
    seen: list[int] = []
    errors: list[str] = []

    def read() -> None:
        subscriber = WeightSubscriber(redis_url, "cartpole")
        while not stop.is_set():
            update = subscriber.poll()
            if update is None:
                continue
            values = {float(v) for array in update.weights.values() for v in np.unique(array)}
            if values != {float(update.seq_no)}:
                errors.append(f"version {update.seq_no} holds {sorted(values)}")
            seen.append(update.seq_no)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for thread in readers:
        thread.start()
    last = 0
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        seq = publisher.client.get(job_keys("default", "cartpole").weights_counter)
        nxt = int(seq or 0) + 1
        last = publisher.publish({f"layer{i}": np.full(3000, nxt, np.float32) for i in range(4)})
        assert last == nxt
    stop.set()
    for thread in readers:
        thread.join()
    assert not errors, errors[:3]
    assert len(seen) > 10 and max(seen) <= last


def test_100_mb_of_weights_round_trip(redis_url: str) -> None:
    weights = {"embedding": np.arange(25 << 20, dtype=np.float32), "bias": np.ones(7, np.float16)}  # 100 MiB
    publisher = WeightPublisher(redis_url, "big")
    started = time.monotonic()
    seq = publisher.publish(weights)
    update = WeightSubscriber(redis_url, "big").poll()
    assert update is not None and update.seq_no == seq
    np.testing.assert_array_equal(update.weights["embedding"], weights["embedding"])
    np.testing.assert_array_equal(update.weights["bias"], weights["bias"])
    assert time.monotonic() - started < 20
    assert redis.Redis.from_url(redis_url).get(job_keys("default", "big").weights_version).split()[1] == b"2"  # chunks
