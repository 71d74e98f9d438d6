"""ExternalRunner in one process: simulator threads call it through PolicyClient over loopback,
and its fragments are exactly their transitions."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rolloutfleet.client import PolicyClient, PolicyClientError
from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.external.book import EpisodeBook, Step
from rolloutfleet.external.runner import ExternalRunner
from rolloutfleet.external.server import ActionServer
from rolloutfleet.fleet.runner_factory import make_env_runner
from rolloutfleet.inference.policy import Policy
from rolloutfleet.sampling.env.external_spaces import ExternalError
from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet.spec.sections.external import PORT_VARIABLE


def external_job(fragment: int = 25, **external: Any) -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "ext"},
            "spec": {
                "env": {"id": "CartPole-v1", "external": {"port": 9900, **external}},
                "sampling": {"rolloutFragmentLength": fragment, "seed": 0},
            },
        }
    )


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(PORT_VARIABLE, "0")
    with make_env_runner(external_job()) as made:
        assert isinstance(made, ExternalRunner)
        yield made


def simulate(address: str, seed: int, episodes: int, log: list[dict[str, Any]]) -> None:
    """A simulator: CartPole stepped here, actions from the server; every transition logged."""
    env = gym.make("CartPole-v1")
    with PolicyClient(address) as client:
        for k in range(episodes):
            obs, _ = env.reset(seed=seed + k)
            episode = client.start_episode()
            for t in range(1000):
                action = client.get_action(episode, obs)
                new_obs, reward, terminated, truncated, _ = env.step(action)
                client.log_returns(episode, float(reward))
                log.append({"eps_id": int(episode), "t": t, "obs": obs, "action": action, "reward": reward,
                            "new_obs": new_obs, "terminated": terminated, "truncated": truncated})  # fmt: skip
                obs = new_obs
                if terminated or truncated:
                    client.end_episode(episode, obs, truncated=truncated)
                    break


def assert_rows_are_the_transitions(batch: SampleBatch, log: list[dict[str, Any]]) -> None:
    by_key = {(int(e), int(t)): i for i, (e, t) in enumerate(zip(batch["eps_id"], batch["t"], strict=True))}
    assert len(by_key) == len(batch) == len(log)
    for step in log:
        i = by_key[(step["eps_id"], step["t"])]
        assert np.array_equal(batch["obs"][i], step["obs"]) and np.array_equal(batch["new_obs"][i], step["new_obs"])
        assert int(batch["actions"][i]) == step["action"] and float(batch["rewards"][i]) == step["reward"]
        assert bool(batch["terminateds"][i]) == step["terminated"]
        assert bool(batch["truncateds"][i]) == step["truncated"]


def test_fragments_are_exactly_the_clients_transitions(runner: ExternalRunner) -> None:
    logs: list[list[dict[str, Any]]] = [[], [], []]
    threads = [threading.Thread(target=simulate, args=(f"127.0.0.1:{runner.port}", 100 * i, 3, logs[i]))
               for i in range(3)]  # fmt: skip
    for thread in threads:
        thread.start()
    fragments = []  # sampled as the clients go: beyond two fragments of rows, their actions wait
    while any(thread.is_alive() for thread in threads) or len(runner.book.ready) >= 25:
        if len(runner.book.ready) >= 25:
            fragments.append(runner.sample())
        else:
            time.sleep(0.005)
    total = sum(len(log) for log in logs)
    assert all(len(fragment) == 25 for fragment in fragments) and len(fragments) == total // 25
    runner.book.close_all("test over")  # what a stopping worker does: the rest are whole episodes here
    rest = runner.book.take(None)
    batch = SampleBatch.concat([*fragments, runner._cut(rest)] if rest else fragments)
    assert_rows_are_the_transitions(batch, [step for log in logs for step in log])
    # every fragment keeps each episode's rows together and in time order
    for fragment in fragments:
        for chunk in fragment.split_by_episode():
            assert np.array_equal(chunk["t"], np.arange(chunk["t"][0], chunk["t"][0] + len(chunk)))
    metrics = runner.get_metrics()
    assert metrics["num_episodes"] == 9 and metrics["num_env_steps_sampled"] == total
    assert metrics["external/actions"] == total
    assert set(batch["weights_seq_no"].tolist()) == {0}
    assert np.all(batch["action_logp"] <= 0) and batch["action_dist_inputs"].shape == (total, 2)


def test_clients_wait_while_two_fragments_of_rows_wait_for_the_worker(runner: ExternalRunner) -> None:
    log: list[dict[str, Any]] = []
    refused: list[PolicyClientError] = []

    def until_refused() -> None:
        try:
            simulate(f"127.0.0.1:{runner.port}", 0, 20, log)
        except PolicyClientError as exc:
            refused.append(exc)

    thread = threading.Thread(target=until_refused)
    thread.start()
    while runner.server.waits == 0:
        time.sleep(0.005)
    assert len(runner.book.ready) == 50 == 2 * runner.sampling.rollout_fragment_length
    steps = len(log)
    time.sleep(0.2)
    assert len(log) == steps  # the client waits for its action
    assert len(runner.sample()) == 25
    while len(log) == steps:  # and goes on once the worker took a fragment
        time.sleep(0.005)
    runner.book.close_all("test over")
    thread.join()
    assert [exc.status for exc in refused] == [503]  # "worker stopping: connect to another worker"


def test_a_reconnected_simulator_continues_its_episode_whole_and_in_order(runner: ExternalRunner) -> None:
    address = f"127.0.0.1:{runner.port}"
    first = PolicyClient(address)
    episode = first.start_episode()
    for k in range(3):
        first.get_action(episode, [float(k), 0.0, 0.0, 0.0])
        first.log_returns(episode, 1.0)
    first._connection.close()  # type: ignore[union-attr]  # the simulator's process restarts: a new client
    second = PolicyClient(address)
    for k in range(3, 5):
        second.get_action(episode, [float(k), 0.0, 0.0, 0.0])
        second.log_returns(episode, 1.0)
    second.end_episode(episode, [5.0, 0.0, 0.0, 0.0])
    rows = runner.book.take(None)
    assert [row["t"] for row in rows] == [0, 1, 2, 3, 4]
    assert [float(row["obs"][0]) for row in rows] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [float(row["new_obs"][0]) for row in rows] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [row["terminateds"] for row in rows] == [False] * 4 + [True]
    assert {row["eps_id"] for row in rows} == {int(episode)}


def test_new_weights_act_at_once_and_rows_carry_their_version(runner: ExternalRunner) -> None:
    weights = {name: np.zeros_like(value) for name, value in runner.get_weights()["default"].items()}
    assert runner.set_weights("default", weights, seq_no=7)
    client = PolicyClient(f"127.0.0.1:{runner.port}")
    episode = client.start_episode()
    client.get_action(episode, [0.0, 0.0, 0.0, 0.0])
    assert client.last_weights_seq_no == 7
    client.end_episode(episode, [0.1, 0.0, 0.0, 0.0])
    (row,) = runner.book.take(None)
    assert row["weights_seq_no"] == 7 and row["action_dist_inputs"].tolist() == [0.0, 0.0]  # zero weights: zero logits


def test_bad_calls_are_refused_naming_the_problem_and_the_server_goes_on(runner: ExternalRunner) -> None:
    client = PolicyClient(f"127.0.0.1:{runner.port}")
    episode = client.start_episode()
    with pytest.raises(PolicyClientError, match=r"obs: expected shape \[4\], got \[3\] \(episode \d+ dropped\)") as bad:
        client.get_action(episode, [0.0, 0.0, 0.0])
    assert bad.value.status == 400
    with pytest.raises(PolicyClientError, match="has ended") as ended:
        client.log_returns(episode, 1.0)
    assert ended.value.status == 409
    with pytest.raises(PolicyClientError, match="unknown episode id 1") as unknown:
        client.get_action("1", [0.0] * 4)
    assert unknown.value.status == 404
    episode = client.start_episode()
    assert client.get_action(episode, [0.0] * 4) in (0, 1)
    metrics = runner.get_metrics()
    assert (metrics["external/episodes_dropped"], metrics["external/calls_refused"]) == (1, 3)
    assert metrics["num_episodes_dropped"] == 1


def test_one_forward_pass_answers_every_waiting_observation() -> None:
    passes: list[int] = []

    def act(obs: np.ndarray) -> list[Step]:
        passes.append(len(obs))
        return [Step(o, np.int64(0), 0.0, np.zeros(2, np.float32), 0.0, 0, None) for o in obs]

    book = EpisodeBook(0, 8, 10)
    server = ActionServer(
        book, threading.Lock(), act, lambda obs: obs, lambda a: int(a), gym.spaces.Box(-1, 1, (1,)), {}
    )
    episodes = [book.get(book.start(book.client(f"c{i}", 0.0), 0.0), 0.0) for i in range(5)]

    async def main() -> None:
        infer = asyncio.create_task(server.infer_forever())
        await asyncio.sleep(0)
        await asyncio.gather(*(server._queue(e, np.zeros(1, np.float32)) for e in episodes))
        infer.cancel()

    asyncio.run(main())
    assert passes == [5]


def test_a_taken_port_is_one_line_naming_the_field(monkeypatch: pytest.MonkeyPatch, runner: ExternalRunner) -> None:
    monkeypatch.setenv(PORT_VARIABLE, str(runner.port))
    with pytest.raises(SpecError, match=f"spec.env.external.port {runner.port}: "):
        ExternalRunner(external_job())


def test_declared_spaces_and_continuous_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_VARIABLE, "0")
    box = {"type": "Box", "shape": [2], "low": -1, "high": 1}
    job = RolloutJob.from_dict(
        {
            "metadata": {"name": "decl"},
            "spec": {
                "env": {"external": {"observationSpace": {"type": "Box", "shape": [3]}, "actionSpace": box}},
                "sampling": {"rolloutFragmentLength": 2, "clipActions": True},
            },
        }
    )
    with ExternalRunner(job) as runner:
        client = PolicyClient(f"127.0.0.1:{runner.port}")
        episode = client.start_episode()
        answers = [client.get_action(episode, [0.5 * k, 0.0, -1.0]) for k in range(2)]
        client.end_episode(episode, [1.0, 1.0, 1.0], truncated=True)
        batch = runner.sample()
    assert batch["actions"].shape == (2, 2) and batch["actions"].dtype == np.float32
    assert all(len(answer) == 2 and all(-1.0 <= a <= 1.0 for a in answer) for answer in answers)  # clipped for it
    assert np.array_equal(np.clip(batch["actions"], -1, 1), np.float32(answers))  # the batch keeps the sample
    assert batch["truncateds"].tolist() == [False, True] and not batch["terminateds"].any()


def test_a_failing_forward_pass_answers_the_waiting_calls_and_serving_goes_on() -> None:
    calls: list[int] = []

    def act(obs: np.ndarray) -> list[Step]:
        calls.append(len(obs))
        if len(calls) == 1:
            raise RuntimeError("custom model bug")
        return [Step(o, np.int64(0), 0.0, np.zeros(2, np.float32), 0.0, 0, None) for o in obs]

    book = EpisodeBook(0, 8, 10)
    server = ActionServer(
        book, threading.Lock(), act, lambda obs: obs, lambda a: int(a), gym.spaces.Box(-1, 1, (1,)), {}
    )
    first, second = (book.get(book.start(book.client(f"c{i}", 0.0), 0.0), 0.0) for i in range(2))

    async def main() -> list[Any]:
        infer = asyncio.create_task(server.infer_forever())
        await asyncio.sleep(0)
        failed = await asyncio.gather(server._queue(first, np.zeros(1, np.float32)), return_exceptions=True)
        served = await server._queue(second, np.zeros(1, np.float32))
        infer.cancel()
        return [*failed, served]

    failed, served = asyncio.run(main())
    assert isinstance(failed, ExternalError) and failed.status == 500
    assert "the policy failed: RuntimeError: custom model bug" in str(failed)
    assert isinstance(served, Step) and book.counters.episodes_dropped == 1 and first.eps_id not in book.episodes


def test_local_inference_acts_as_the_worker_would_and_ships_the_transitions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_VARIABLE, "0")
    with ExternalRunner(external_job(fragment=5000)) as runner:  # room for every row: nothing samples here
        check_local_inference(runner)


def check_local_inference(runner: ExternalRunner) -> None:
    client = PolicyClient(f"127.0.0.1:{runner.port}", inference="local", ship_every=10)
    env, log = gym.make("CartPole-v1"), []
    initial = Policy(runner.policy.spec, runner.observation_space, runner.action_space)
    initial.set_weights(runner.get_weights()["default"])
    for k in range(3):
        obs, _ = env.reset(seed=k)
        episode = client.start_episode()
        if k == 1:  # new weights on the worker: the next shipment's answer makes the client pull them
            zeros = {name: np.zeros_like(value) for name, value in runner.get_weights()["default"].items()}
            runner.set_weights("default", zeros, seq_no=5)
        for t in range(1000):
            action = client.get_action(episode, obs)
            new_obs, reward, terminated, truncated, _ = env.step(action)
            client.log_returns(episode, float(reward))
            log.append({"eps_id": int(episode), "t": t, "obs": obs, "action": action, "reward": reward,
                        "new_obs": new_obs, "terminated": terminated, "truncated": truncated})  # fmt: skip
            obs = new_obs
            if terminated or truncated:
                client.end_episode(episode, obs, truncated=truncated)
                break
    batch = runner._cut(runner.book.take(None))
    assert_rows_are_the_transitions(batch, log)
    assert runner.server.acted == 0  # every action was taken in the client
    seq = batch["weights_seq_no"]
    assert seq[0] == 0 and seq[-1] == 5 and np.all(np.diff(seq) >= 0)
    # what the client recorded is what the worker's policy computes for those observations
    first = batch.rows(seq == 0)
    logits, values = initial.forward(first["obs"])
    assert np.allclose(first["action_dist_inputs"], logits, atol=1e-5)
    assert np.allclose(first["vf_preds"], values, atol=1e-5)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    assert np.allclose(first["action_logp"], logp[np.arange(len(first)), first["actions"]], atol=1e-5)
    assert np.all(batch.rows(seq == 5)["action_dist_inputs"] == 0)  # the zero weights the client pulled


def test_local_inference_refused_with_the_reason_and_bad_rows_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_VARIABLE, "0")
    filtered = external_job().model_dump(by_alias=True)
    filtered["spec"]["sampling"]["observationFilter"] = "meanStd"
    with ExternalRunner(RolloutJob.from_dict(filtered)) as runner:
        client = PolicyClient(f"127.0.0.1:{runner.port}", inference="local")
        episode = client.start_episode()
        with pytest.raises(PolicyClientError, match=r"inference='local' is not available: .*observationFilter") as no:
            client.get_action(episode, [0.0] * 4)
        assert no.value.status == 409
    with ExternalRunner(external_job()) as runner:
        client = PolicyClient(f"127.0.0.1:{runner.port}")
        episode = client.start_episode()
        row = {"obs": [0.0] * 4, "new_obs": [0.0] * 4, "action": 7, "reward": 1.0, "logp": -0.7,
               "dist_inputs": [0.0, 0.0], "vf": 0.0, "weights_seq_no": 0}  # fmt: skip
        with pytest.raises(PolicyClientError, match=r"rows\[0\].action: expected an integer in \[0, 2\)") as bad:
            client._call("POST", f"/v1/episodes/{episode}/rows", {"rows": [row], "end": None})
        assert bad.value.status == 400 and "dropped" in str(bad.value)


def test_an_episode_this_client_did_not_start_is_refused_not_moved(runner: ExternalRunner) -> None:
    client = PolicyClient(f"127.0.0.1:{runner.port}")
    with pytest.raises(PolicyClientError, match="unknown episode id 42: another worker started it") as elsewhere:
        client.get_action("42", [0.0] * 4)  # an id from elsewhere, not one this client started
    assert (elsewhere.value.status, elsewhere.value.kind, client.episodes_moved) == (404, "elsewhere", 0)
    assert runner.book.episodes == {}  # nothing started on its behalf
