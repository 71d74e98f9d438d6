"""The hollow-worker bench on a real redis-server, at a size a test affords: its hollow
workers run the real transport (Redis's counters see their commands), every phase is
measured, and its figures agree with Redis and with the fleet's size."""

from __future__ import annotations

import pytest
import redis

from bench.bench_dataplane import WEIGHTS_BYTES, per_worker_s, run_size, slowlog
from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from tests.integration.redis_server import redis_server_binary

pytestmark = pytest.mark.integration


def test_every_phase_of_a_small_fleet_is_measured_from_redis_and_the_learner() -> None:
    redis_server_binary()  # fails under CI where it is missing
    result = run_size(4, seconds=3.0, max_len=4)
    waiting_calls, _ = per_worker_s(result, "waiting")
    assert 0 < waiting_calls <= 3.0, result["waiting"]["commands"]  # blocked on the room signal, not polling
    assert "xread" in result["waiting"]["commands"]
    assert result["connections_per_worker"] >= 2  # its publisher's and its weights announcements'
    # Weights are read when announced, not every fragment (polling: 4 workers x ~3 fragments).
    assert result["flowing"]["commands"].get("get", 0) <= 4, result["flowing"]["commands"]
    assert result["resume_s"]["max"] < 60 and result["heartbeats"] == 4
    assert result["flowing"]["rows_per_s"] > 0 and sum(result["flowing"]["commands"].values()) > 0
    # The fleet's own processes' CPU, as the kernel counts it (ticks of 10 ms): publishing used some.
    assert result["waiting"]["fleet_cpu_s"] >= 0 and result["flowing"]["fleet_cpu_s"] > 0
    # Every worker downloaded the whole version once: Redis sent at least 4 x its size.
    weights = result["weights"]
    assert weights["bound"] == 4 * WEIGHTS_BYTES and weights["net_out"] >= weights["bound"]
    assert weights["max"] >= weights["p50"] >= 0 and weights["raw_s"] > 0


def test_on_a_redis_cluster_the_fleet_spreads_its_stream_over_the_masters() -> None:
    redis_server_binary()
    result = run_size(6, seconds=3.0, max_len=6, cluster=True)
    assert result["nodes"] == 3 and result["heartbeats"] == 6
    # Each master got the batches of its shard: every one answered commands while they flowed.
    assert all(calls > 0 for calls in result["flowing"]["calls_by_node"]), result["flowing"]["calls_by_node"]
    assert result["flowing"]["commands"].get("xadd", 0) > 0 and result["flowing"]["rows_per_s"] > 0
    waiting_calls, _ = per_worker_s(result, "waiting")
    assert 0 < waiting_calls <= 3.0, result["waiting"]["commands"]
    assert result["weights"]["net_out"] >= result["weights"]["bound"] == 6 * WEIGHTS_BYTES


def test_with_read_replicas_the_version_leaves_the_primary_once_a_replica() -> None:
    redis_server_binary()
    result = run_size(6, seconds=3.0, max_len=6, replicas=2)
    weights = result["weights"]
    assert result["replicas"] == 2 and weights["bound"] == 6 * WEIGHTS_BYTES
    # Redis's own byte counters: the workers' copies came from the replicas (3 workers each),
    # the primary sent the version once to each replica (with the batches written meanwhile,
    # which a replica copies too), and to its clients only the learner's batches.
    assert weights["replicas_net_out"] >= weights["bound"]
    assert 2 * WEIGHTS_BYTES <= weights["repl_out"] < 4 * WEIGHTS_BYTES
    assert weights["net_out"] < WEIGHTS_BYTES / 2
    assert result["connections_per_worker"] < 1.5  # on the primary: the publisher's; the weights' are the replica's


def test_the_slowlog_gives_redis_own_time_for_each_command_and_restores_its_threshold() -> None:
    redis_server_binary()
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        client.hset("beats", mapping={str(i): "x" * 100 for i in range(2_000)})
        with slowlog(server.url, 0) as logged:  # 0: every command
            client.hgetall("beats")
        assert [b"HGETALL", b"beats"] in [command[:2] for command, _ in logged]
        assert all(us >= 0 for _, us in logged)
        assert client.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"] == "10000"  # Redis's default
        client.close()
