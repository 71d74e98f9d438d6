"""Seats of a two-player turn-based game for self-play: which policy plays which side.

A ``spec.multiAgent.policyMapping.entryPoint`` is imported by every worker: this module
stays light (no torch), unlike the learner in :mod:`rolloutfleet.examples.selfplay`.
"""

from __future__ import annotations

from typing import Any

from rolloutfleet import EpisodeInfo

TRAINED = "main"
SNAPSHOT = "main_v1"
FIRST_SEAT = "player_1"
"""The agent that moves first in PettingZoo's two-player classic games."""


def alternate_seats(agent_id: Any, episode: EpisodeInfo) -> str:
    """``spec.multiAgent.policyMapping.entryPoint``: ``main`` takes the first seat in games
    with an even ``eps_id`` and the second in the others (a worker numbers its episodes in
    order, so seats alternate), ``main_v1`` the other seat: ``main`` learns both sides.

    >>> alternate_seats("player_1", EpisodeInfo(0, 6, 0)), alternate_seats("player_2", EpisodeInfo(0, 6, 0))
    ('main', 'main_v1')
    >>> alternate_seats("player_1", EpisodeInfo(0, 7, 0))
    'main_v1'
    """
    first = episode.eps_id % 2 == 0
    return TRAINED if (str(agent_id) == FIRST_SEAT) == first else SNAPSHOT
