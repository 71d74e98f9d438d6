"""The episode book: which rows an external episode yields, and when they are released."""

from __future__ import annotations

import numpy as np
import pytest

from rolloutfleet.external import book as book_module
from rolloutfleet.external.book import EPISODES_PER_CLIENT, EpisodeBook, Step
from rolloutfleet.sampling.env.external_spaces import BadInput, EpisodeElsewhere, EpisodeEnded, Refused, UnknownEpisode


def step(action: int, obs: np.ndarray) -> Step:
    return Step(obs, np.int64(action), -0.5, np.zeros(2, np.float32), 0.0, 3, None)


def play(book: EpisodeBook, eps_id: int, actions: list[int], rewards: list[float], now: float = 0.0) -> None:
    """Observe obs k (= [k]), act actions[k], reward rewards[k], for every k."""
    episode = book.get(eps_id, now)
    for k, (action, reward) in enumerate(zip(actions, rewards, strict=True)):
        obs = np.array([float(k)], np.float32)
        book.observe(episode, obs)
        book.acted(episode, step(action, obs))
        book.log_returns(episode, reward)


def test_rows_are_the_transitions_with_the_last_one_held_until_the_episode_goes_on() -> None:
    book = EpisodeBook(1000, max_clients=4, timeout_s=10)
    eps = book.start(book.client("a", 0.0), 0.0)
    play(book, eps, [1, 0, 1], [1.0, 2.0, 3.0])
    # rows 0 and 1 are complete (obs 1 and 2 arrived); row 1 is held back, row 0 released
    assert [row["t"] for row in book.ready] == [0]
    book.end(book.get(eps, 0.0), np.array([9.0], np.float32), truncated=False)
    rows = book.take(None)
    assert [row["t"] for row in rows] == [0, 1, 2]
    assert [int(row["actions"]) for row in rows] == [1, 0, 1]
    assert [row["rewards"] for row in rows] == [1.0, 2.0, 3.0]
    assert [float(row["obs"][0]) for row in rows] == [0.0, 1.0, 2.0]
    assert [float(row["new_obs"][0]) for row in rows] == [1.0, 2.0, 9.0]
    assert [row["terminateds"] for row in rows] == [False, False, True]
    assert not any(row["truncateds"] for row in rows)
    assert book.ended_episodes == [(6.0, 3)] and book.new_rows == 3
    assert {row["eps_id"] for row in rows} == {1000} and {row["weights_seq_no"] for row in rows} == {3}


def test_rewards_add_up_until_the_next_action() -> None:
    book = EpisodeBook(0, 4, 10)
    eps = book.start(book.client("a", 0.0), 0.0)
    play(book, eps, [1], [1.0])
    book.log_returns(book.get(eps, 0.0), 0.5)
    book.end(book.get(eps, 0.0), np.array([1.0], np.float32), truncated=True)
    (row,) = book.take(None)
    assert row["rewards"] == 1.5 and row["truncateds"] and not row["terminateds"]


def test_a_silent_episode_is_closed_as_truncated_and_its_unanswered_action_dropped() -> None:
    book = EpisodeBook(0, 4, timeout_s=5)
    eps = book.start(book.client("a", 0.0), 0.0)
    play(book, eps, [1, 0, 1], [1.0, 1.0, 1.0], now=1.0)
    assert book.expire(5.5) == []  # silent for 4.5 s only
    assert book.expire(6.0) == [eps]
    rows = book.take(None)
    assert [row["t"] for row in rows] == [0, 1]  # the third action never saw its consequence
    assert [row["truncateds"] for row in rows] == [False, True]
    assert not any(row["terminateds"] for row in rows)
    assert book.counters.episodes_timed_out == 1 and book.ended_episodes == []
    assert book.clients == {}  # the silent client is forgotten too
    with pytest.raises(EpisodeEnded, match="silent for 5 s"):
        book.get(eps, 7.0)


def test_bad_input_drops_the_episode_and_what_it_held() -> None:
    book = EpisodeBook(0, 4, 10)
    eps = book.start(book.client("a", 0.0), 0.0)
    play(book, eps, [1, 1], [1.0, 1.0])
    book.drop(eps, "obs: expected shape [4], got [2]")
    assert [row["t"] for row in book.take(None)] == []  # row 0 was held: dropped with the episode
    assert book.counters.episodes_dropped == 1
    with pytest.raises(EpisodeEnded, match=r"dropped: obs: expected shape \[4\]"):
        book.get(eps, 0.0)
    with pytest.raises(UnknownEpisode, match="unknown episode id 12345"):
        book.get(12345, 0.0)


def test_an_id_this_book_never_gave_is_elsewhere_one_it_forgot_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(book_module, "ENDED_REMEMBERED", 1)
    book = EpisodeBook(1 << 44, 4, 10)  # worker 1's ids: 1 << 44, (1 << 44) + 1, ...
    slot = book.client("a", 0.0)
    first, second = book.start(slot, 0.0), book.start(slot, 0.0)
    assert (first, second) == (1 << 44, (1 << 44) + 1)
    for eps_id in (first, second):
        book.end(book.get(eps_id, 0.0), np.array([0.0], np.float32), truncated=False)
    with pytest.raises(EpisodeEnded):
        book.get(second, 0.0)
    with pytest.raises(UnknownEpisode) as forgotten:  # its own id, no longer remembered
        book.get(first, 0.0)
    assert not isinstance(forgotten.value, EpisodeElsewhere) and forgotten.value.kind is None
    for foreign in (0, (1 << 44) - 1, (1 << 44) + 2, 2 << 44):  # another worker's, or one not given yet
        with pytest.raises(EpisodeElsewhere, match=f"unknown episode id {foreign}: another worker started it") as moved:
            book.get(foreign, 0.0)
        assert (moved.value.status, moved.value.kind) == (404, "elsewhere")


def test_misuse_is_named() -> None:
    book = EpisodeBook(0, 4, 10)
    episode = book.get(book.start(book.client("a", 0.0), 0.0), 0.0)
    with pytest.raises(BadInput, match="a reward before the first get_action"):
        book.log_returns(episode, 1.0)
    book.observe(episode, np.zeros(1, np.float32))
    with pytest.raises(BadInput, match="already waits for its action"):
        book.observe(episode, np.zeros(1, np.float32))


def test_clients_beyond_max_clients_are_refused_with_the_reason() -> None:
    book = EpisodeBook(0, max_clients=2, timeout_s=10)
    assert (book.client("a", 0.0), book.client("b", 0.0), book.client("a", 1.0)) == (0, 1, 0)
    with pytest.raises(Refused, match=r"server full: 2 clients connected \(spec.env.external.maxClients\)"):
        book.client("c", 1.0)
    assert book.counters.clients_refused == 1
    book.leave("a")
    assert book.client("c", 2.0) == 0  # the freed slot


def test_complete_episodes_holds_every_row_until_the_end() -> None:
    book = EpisodeBook(0, 4, 10, complete_episodes=True)
    eps = book.start(book.client("a", 0.0), 0.0)
    play(book, eps, [1, 0, 1, 0], [1.0] * 4)
    assert book.ready == []
    book.end(book.get(eps, 0.0), np.zeros(1, np.float32), truncated=False)
    assert [row["t"] for row in book.take(None)] == [0, 1, 2, 3]


def test_a_stopping_worker_closes_open_episodes_as_truncated_and_refuses_clients() -> None:
    book = EpisodeBook(0, 4, 10)
    eps = book.start(book.client("a", 0.0), 0.0)
    play(book, eps, [1, 0], [1.0, 1.0])
    book.close_all("the worker stopped")
    assert [row["truncateds"] for row in book.take(None)] == [True]
    with pytest.raises(Refused, match="worker stopping"):
        book.client("a", 1.0)


def test_open_episodes_are_bounded_per_client_slot() -> None:
    book = EpisodeBook(0, max_clients=1, timeout_s=10)
    slot = book.client("a", 0.0)
    for _ in range(EPISODES_PER_CLIENT):
        book.start(slot, 0.0)
    with pytest.raises(Refused, match="64 episodes open"):
        book.start(slot, 0.0)
