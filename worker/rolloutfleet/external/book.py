"""The external episodes of one worker: clients, open episodes, and the rows they complete.

Pure bookkeeping (no I/O, no clock of its own: callers pass ``now``). A row is
``(obs, action, reward, new_obs, flags)``: it completes when the episode's next observation
arrives (``get_action``) or when it ends (``end_episode``). The newest completed row of an
episode is held back until the episode goes on or ends, so that an episode whose client
vanishes ends in the stream with ``truncateds`` set on its last row (the action still waiting
for a consequence is discarded): never shipped as if it went on or as terminated.

``complete_episodes`` jobs hold every row of an episode until it ends.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rolloutfleet.sampling.env.external_spaces import (
    BadInput,
    EpisodeElsewhere,
    EpisodeEnded,
    Refused,
    Stopping,
    UnknownEpisode,
)

ENDED_REMEMBERED = 100_000
"""Ended episode ids kept to tell "ended" from "unknown" in errors."""

EPISODES_PER_CLIENT = 64
"""Open episodes allowed per ``maxClients`` (a client that never ends its episodes is bounded)."""

Row = dict[str, Any]


@dataclass
class Step:
    """An action taken, waiting for the observation that follows it."""

    obs: np.ndarray
    action: np.ndarray
    logp: float
    dist_inputs: np.ndarray
    vf: float
    seq_no: int
    scale: float | None


@dataclass
class Episode:
    eps_id: int
    env_id: int
    last_seen: float
    t: int = 0
    reward: float = 0.0
    """Reward logged since the last action."""
    total: float = 0.0
    step: Step | None = None
    acting: bool = False
    """An observation waits for its action (one at a time per episode)."""
    held: list[Row] = field(default_factory=list)


@dataclass
class Counters:
    episodes_dropped: int = 0
    episodes_timed_out: int = 0
    clients_refused: int = 0
    calls_refused: int = 0
    """Calls answered with an error (bad input, an unknown or ended episode)."""


class EpisodeBook:
    """Clients and their episodes; completed rows collect in :attr:`ready` in the order they
    were released (an episode's rows in time order)."""

    def __init__(self, eps_base: int, max_clients: int, timeout_s: float, complete_episodes: bool = False) -> None:
        self.max_clients = max_clients
        self.timeout_s = timeout_s
        self.complete_episodes = complete_episodes
        self.clients: dict[str, tuple[int, float]] = {}
        """Client id -> (its slot, the env_id its rows carry; last seen)."""
        self.episodes: dict[int, Episode] = {}
        self.ready: list[Row] = []
        self.counters = Counters()
        self.ended_episodes: list[tuple[float, int]] = []
        """(return, length) of episodes that ended since the runner last looked."""
        self.new_rows = 0
        """Rows completed since the runner last looked (its env-step counter)."""
        self.stopping = False
        self._eps_base = eps_base
        self._next_eps = 0
        self._ended: OrderedDict[int, str] = OrderedDict()

    # -- clients ---------------------------------------------------------------------

    def client(self, client_id: str, now: float) -> int:
        """Note a call of ``client_id``; its slot (``env_id``). A new client beyond ``maxClients``
        is :class:`Refused`."""
        if self.stopping:
            raise Stopping("worker stopping: connect to another worker")
        known = self.clients.get(client_id)
        if known is not None:
            self.clients[client_id] = (known[0], now)
            return known[0]
        if len(self.clients) >= self.max_clients:
            self.counters.clients_refused += 1
            raise Refused(
                f"server full: {self.max_clients} clients connected (spec.env.external.maxClients); "
                "try another worker or later"
            )
        taken = {slot for slot, _ in self.clients.values()}
        slot = next(i for i in range(self.max_clients) if i not in taken)
        self.clients[client_id] = (slot, now)
        return slot

    def leave(self, client_id: str) -> None:
        self.clients.pop(client_id, None)

    # -- episodes --------------------------------------------------------------------

    def start(self, slot: int, now: float) -> int:
        if len(self.episodes) >= self.max_clients * EPISODES_PER_CLIENT:
            self.counters.clients_refused += 1
            raise Refused(
                f"{len(self.episodes)} episodes open ({EPISODES_PER_CLIENT} per client of maxClients): "
                "end some before starting more"
            )
        eps_id = self._eps_base + self._next_eps
        self._next_eps += 1
        self.episodes[eps_id] = Episode(eps_id, slot, now)
        return eps_id

    def get(self, eps_id: int, now: float) -> Episode:
        episode = self.episodes.get(eps_id)
        if episode is None:
            how = self._ended.get(eps_id)
            if how is not None:
                raise EpisodeEnded(f"episode {eps_id} has ended ({how}); start a new one")
            if not self._eps_base <= eps_id < self._eps_base + self._next_eps:  # not an id this book gave
                raise EpisodeElsewhere(
                    f"unknown episode id {eps_id}: another worker started it (or this worker before a restart); "
                    "an episode cannot move between workers: start a new one here"
                )
            raise UnknownEpisode(f"unknown episode id {eps_id}: start_episode() gives the ids this server knows")
        episode.last_seen = now
        return episode

    def observe(self, episode: Episode, obs: np.ndarray) -> None:
        """The next observation: completes the row of the action waiting for it."""
        if episode.acting:
            raise BadInput(f"episode {episode.eps_id}: an observation already waits for its action")
        if episode.step is not None:
            self._complete(episode, obs, terminated=False, truncated=False)
        episode.acting = True

    def acted(self, episode: Episode, step: Step) -> None:
        episode.step, episode.acting = step, False

    def log_returns(self, episode: Episode, reward: float) -> None:
        if episode.step is None:
            raise BadInput(f"episode {episode.eps_id}: a reward before the first get_action() rewards no action")
        episode.reward += reward
        episode.total += reward

    def end(self, episode: Episode, obs: np.ndarray, truncated: bool) -> None:
        """The episode ended at ``obs`` (terminated unless ``truncated``); its rows are released."""
        if episode.acting:
            raise BadInput(f"episode {episode.eps_id}: ended while an observation waits for its action")
        if episode.step is not None:
            self._complete(episode, obs, terminated=not truncated, truncated=truncated)
        self._close(episode, "truncated" if truncated else "terminated")
        self.ended_episodes.append((episode.total, episode.t))

    def add_rows(self, episode: Episode, rows: list[tuple[Step, float, np.ndarray]], end: str | None) -> None:
        """Rows a client acting locally shipped (``inference="local"``), then its end if ``end``."""
        if episode.acting or episode.step is not None:
            raise BadInput(f"episode {episode.eps_id}: the server acts for it; ship rows for local episodes only")
        for k, (step, reward, new_obs) in enumerate(rows):
            episode.step, episode.reward = step, reward
            episode.total += reward
            last = end is not None and k == len(rows) - 1
            self._complete(episode, new_obs, last and end == "terminated", last and end == "truncated")
        if end is not None:
            self._close(episode, end)
            self.ended_episodes.append((episode.total, episode.t))

    def drop(self, eps_id: int, reason: str) -> None:
        """Bad input: the episode's rows not yet released are discarded (counted)."""
        episode = self.episodes.pop(eps_id, None)
        if episode is None:
            return
        self.counters.episodes_dropped += 1
        self._remember(eps_id, f"dropped: {reason}")

    def expire(self, now: float) -> list[int]:
        """Close episodes silent for ``timeout_s`` as truncated (counted), forget silent clients;
        returns the ids closed."""
        closed = [eps for eps, episode in self.episodes.items() if now - episode.last_seen >= self.timeout_s]
        for eps_id in closed:
            episode = self.episodes[eps_id]
            if episode.held:
                episode.held[-1] = {**episode.held[-1], "truncateds": True}
            self._close(episode, f"its client was silent for {self.timeout_s:g} s: closed as truncated")
            self.counters.episodes_timed_out += 1
        for client_id in [c for c, (_, seen) in self.clients.items() if now - seen >= self.timeout_s]:
            del self.clients[client_id]
        return closed

    def close_all(self, reason: str) -> None:
        """The worker stops: every open episode is closed as truncated, new clients are refused."""
        self.stopping = True
        for episode in list(self.episodes.values()):
            if episode.held:
                episode.held[-1] = {**episode.held[-1], "truncateds": True}
            self._close(episode, reason)

    def take(self, rows: int | None) -> list[Row]:
        """The first ``rows`` ready rows (all with None)."""
        taken, self.ready = (self.ready, []) if rows is None else (self.ready[:rows], self.ready[rows:])
        return taken

    # -- internals -------------------------------------------------------------------

    def _complete(self, episode: Episode, new_obs: np.ndarray, terminated: bool, truncated: bool) -> None:
        step = episode.step
        assert step is not None
        row: Row = {
            "obs": step.obs, "new_obs": new_obs, "actions": step.action, "rewards": episode.reward,
            "terminateds": terminated, "truncateds": truncated, "eps_id": episode.eps_id, "env_id": episode.env_id,
            "t": episode.t, "action_logp": step.logp, "action_dist_inputs": step.dist_inputs,
            "vf_preds": step.vf, "weights_seq_no": step.seq_no, "exploration_scale": step.scale,
        }  # fmt: skip
        episode.t += 1
        episode.reward = 0.0
        episode.step = None
        self.new_rows += 1
        if not self.complete_episodes and episode.held:
            self.ready.extend(episode.held)
            episode.held = []
        episode.held.append(row)

    def _close(self, episode: Episode, how: str) -> None:
        self.ready.extend(episode.held)
        episode.held = []
        del self.episodes[episode.eps_id]
        self._remember(episode.eps_id, how)

    def _remember(self, eps_id: int, how: str) -> None:
        self._ended[eps_id] = how
        while len(self._ended) > ENDED_REMEMBERED:
            self._ended.popitem(last=False)
