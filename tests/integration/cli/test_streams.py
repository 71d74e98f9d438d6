"""``consume`` and ``streams`` as the CLI runs them (argparse -> run function)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import redis

from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.entries import Message
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.stream_status import Hold, read_stream_status
from tests.integration.cli.cli_kit import run_cli

pytestmark = pytest.mark.integration


def test_consume_saves_columns_with_per_row_metadata(redis_url: str, tmp_path: Path) -> None:
    publisher = BatchPublisher(redis_url, "cartpole", "team")
    for worker in range(3):
        publisher.publish({"obs": np.full((worker + 1, 2), worker, np.float32)}, weights_seq_no=10 + worker,
                          worker_index=worker)  # fmt: skip
    output = tmp_path / "out.npz"
    assert run_cli("consume", "--redis", redis_url, "--job", "cartpole", "--namespace", "team", "--count", "3",
               "--output", str(output)) == 0  # fmt: skip
    with np.load(output, allow_pickle=False) as data:
        assert data["obs"].shape == (6, 2)
        assert data["worker_index"].tolist() == [0, 1, 1, 2, 2, 2]
        assert data["weights_seq_no"].tolist() == [10, 11, 11, 12, 12, 12]


def test_consume_saves_each_rows_own_weights_version(redis_url: str, tmp_path: Path) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    publisher.publish({"obs": np.zeros((3, 2), np.float32), "weights_seq_no": np.array([3, 7, 7])})
    output = tmp_path / "out.npz"
    assert run_cli("consume", "--redis", redis_url, "--job", "cartpole", "--count", "1", "--output", str(output)) == 0
    with np.load(output, allow_pickle=False) as data:
        assert data["weights_seq_no"].tolist() == [3, 7, 7]  # not the entry's newest version on every row


def test_consume_gives_up_without_enough_batches(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_cli("consume", "--redis", redis_url, "--job", "idle", "--count", "1", "--output", str(tmp_path / "x.npz"),
               "--timeout", "0.2")  # fmt: skip
    assert code == 1 and "0 of 1 batches" in capsys.readouterr().err


def test_streams_lists_every_job(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps cells to the terminal width
    BatchPublisher(redis_url, "cartpole", "team").publish({"obs": np.zeros(2)})
    BatchPublisher(redis_url, "pong", "default").publish({"obs": np.zeros(2)})
    for policy in ("red", "blue"):  # a multi-agent job: one stream per policy
        BatchPublisher(redis_url, "tag", "default", policy=policy).publish({"obs": np.zeros(2)})
    run_cli("consume", "--redis", redis_url, "--job", "pong", "--count", "1", "--output", str(tmp_path / "pong.npz"),
        "--group", "learner", "--timeout", "5")  # fmt: skip
    run_cli("consume", "--redis", redis_url, "--job", "tag", "--policy", "red", "--count", "1", "--output",
        str(tmp_path / "red.npz"), "--group", "red-learner", "--timeout", "5")  # fmt: skip
    capsys.readouterr()
    assert run_cli("streams", "--redis", redis_url) == 0
    out = capsys.readouterr().out
    assert "team/cartpole" in out and "default/pong" in out and "learner" in out
    assert "default/tag (blue)" in out and "default/tag (red)" in out and "red-learner" in out


def test_consume_without_a_group_only_looks(redis_url: str, tmp_path: Path) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    for worker in range(5):
        publisher.publish({"obs": np.full((1, 2), worker, np.float32)}, worker_index=worker)
    output = tmp_path / "look.npz"
    for _ in range(2):  # looking twice sees the same oldest entries: nothing was consumed
        assert (
            run_cli("consume", "--redis", redis_url, "--job", "cartpole", "--count", "3", "--output", str(output)) == 0
        )
        with np.load(output, allow_pickle=False) as data:
            assert data["worker_index"].tolist() == [0, 1, 2]
    client = redis.Redis.from_url(redis_url)
    assert client.xinfo_groups(publisher.keys.batches) == []  # nothing left behind
    assert client.xlen(publisher.keys.batches) == 5


def test_consume_as_a_group_acknowledges_what_it_saved(redis_url: str, tmp_path: Path) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    for worker in range(4):
        publisher.publish({"obs": np.full((2, 2), worker, np.float32)}, worker_index=worker)
    output = tmp_path / "as-group.npz"
    assert run_cli("consume", "--redis", redis_url, "--job", "cartpole", "--count", "3", "--output", str(output),
               "--group", "inspect") == 0  # fmt: skip
    with np.load(output, allow_pickle=False) as data:
        assert data["worker_index"].tolist() == [0, 0, 1, 1, 2, 2]
    [group] = redis.Redis.from_url(redis_url).xinfo_groups(publisher.keys.batches)
    assert (group["name"], group["pending"], group["lag"]) == (b"inspect", 0, 1)
    assert [p.name for p in tmp_path.iterdir()] == ["as-group.npz"]  # the spool is gone


def test_consume_refuses_a_consumer_name_without_a_group(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_cli("consume", "--redis", redis_url, "--job", "cartpole", "--count", "1", "--output",
               str(tmp_path / "x.npz"), "--consumer", "me")  # fmt: skip
    assert code == 2 and "--consumer names a consumer of --group" in capsys.readouterr().err


def test_streams_shows_which_group_holds_the_workers_back_and_since_when(
    redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    publisher = BatchPublisher(
        redis_url, "held", max_len=2, backpressure="block", block_timeout_s=30, learner_idle_s=2.0
    )
    inspect = BatchConsumer(redis_url, "held", group="inspect", block_s=0.05)
    publisher.publish({"obs": np.zeros(2)})
    inspect.read(count=1, timeout=5)  # then never again: idle past learner_idle_s, not counted
    learner = BatchConsumer(redis_url, "held", group="learner", block_s=0.05)
    publisher.publish({"obs": np.zeros(2)})
    held = learner.read(count=2, timeout=5)  # pending: the learner holds both entries
    assert len(held) == 2
    time.sleep(2.5)
    reading = threading.Event()

    def learn() -> None:  # reads (so it stays a learner) but acks nothing until told
        while not reading.is_set():
            learner.read(timeout=0.1)

    thread = threading.Thread(target=learn)
    thread.start()
    waited = threading.Thread(target=publisher.publish, args=({"obs": np.zeros(2)},))
    waited.start()
    try:
        time.sleep(2.5)  # the wait has lasted over a second: the workers say who holds them
        capsys.readouterr()
        assert run_cli("streams", "--redis", redis_url) == 0
        out = capsys.readouterr().out
        line = next(line for line in out.splitlines() if line.startswith("default/held:"))
        assert "group 'learner' holds the workers back since" in line, out
        assert "2 unconsumed entries, maxLen 2" in line and "not counted (no read within 2 s): inspect" in line
        assert re.search(r"since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \((\d+) s\)", line), line
        assert waited.is_alive()  # still held back
    finally:
        reading.set()
        thread.join(10)
        learner.ack(held)
        waited.join(30)
    assert not waited.is_alive() and publisher.stats.blocked == 1


def test_the_hold_is_dated_from_when_its_holder_began_to_hold(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "paced", max_len=1, backpressure="block", block_timeout_s=60)
    client = redis.Redis.from_url(redis_url)
    publisher.publish({"obs": np.zeros(2)})
    waited = threading.Thread(target=publisher.publish, args=({"obs": np.zeros(2)},))
    waited.start()  # no learner yet: the workers wait for one

    def hold(group: str | None) -> Hold:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status = read_stream_status(client, publisher.keys)
            if status.hold is not None and status.hold.group == group:
                return status.hold
            time.sleep(0.1)
        raise AssertionError(f"no hold by {group!r} recorded: {read_stream_status(client, publisher.keys)}")

    before = hold(None)
    learner = BatchConsumer(redis_url, "paced", block_s=0.05)
    stop = threading.Event()
    held: list[Message] = []

    def learn() -> None:  # takes the entry, keeps reading, acks nothing until told
        while not stop.is_set():
            held.extend(learner.read(timeout=0.1))

    thread = threading.Thread(target=learn)
    thread.start()
    try:
        after = hold("learner")
        assert after.since > before.since  # from when the learner began to hold, not the wait's start
        assert (after.unconsumed, after.max_len) == (1, 1)
    finally:
        stop.set()
        thread.join(10)
        learner.ack(held)
        waited.join(30)
    assert not waited.is_alive()


def test_consume_saves_dict_observation_leaves_as_their_own_columns(redis_url: str, tmp_path: Path) -> None:
    from rolloutfleet import EnvRunner, RolloutJob

    job = RolloutJob.from_dict({"metadata": {"name": "masked"}, "spec": {
        "env": {"entryPoint": "tests.unit.sampling.sampler_test_envs:make_masked_counter", "numEnvs": 2},
        "sampling": {"rolloutFragmentLength": 4}}})  # fmt: skip
    batch = EnvRunner(job).sample()
    BatchPublisher(redis_url, "masked").publish(batch)
    output = tmp_path / "out.npz"
    assert run_cli("consume", "--redis", redis_url, "--job", "masked", "--count", "1", "--output", str(output)) == 0
    with np.load(output, allow_pickle=False) as data:
        for name in ("obs/observation", "obs/action_mask", "new_obs/observation", "new_obs/action_mask", "action_mask"):
            np.testing.assert_array_equal(data[name], batch[name])
            assert data[name].dtype == batch[name].dtype
        assert "obs" not in data.files


def test_streams_in_a_pipe_shows_whole_names_and_json_says_the_same(redis_url: str) -> None:
    """Piped (no terminal, no COLUMNS), the table was cut to 80 columns: every name ``defa…``.
    Now it is as wide as it needs; ``--output json`` gives the same figures to a program."""
    import json
    import subprocess
    import sys

    job, group = "a-job-with-a-name-as-long-as-kubernetes-allows-x", "a-learner-group-with-a-long-name"
    publisher = BatchPublisher(redis_url, job, "a-team-namespace")
    publisher.publish({"obs": np.zeros(2)})
    BatchConsumer(redis_url, job, "a-team-namespace", group=group).read(count=1, timeout=5)
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("COLUMNS", "LINES")}
    table = subprocess.run([sys.executable, "-m", "rolloutfleet.cli.main", "streams", "--redis", redis_url],
                           capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if job in line)
    assert f"a-team-namespace/{job}" in row and group in row and "…" not in table.stdout, table.stdout
    out = subprocess.run([sys.executable, "-m", "rolloutfleet.cli.main", "streams", "--redis", redis_url, "--output",
                          "json"], capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    [stream] = [s for s in json.loads(out.stdout)["streams"] if s["job"] == job]
    assert (stream["namespace"], stream["length"], stream["policy"]) == ("a-team-namespace", 1, None)
    [read] = stream["groups"]
    assert (read["name"], read["pending"], read["consumers"]) == (group, 1, 1)
