"""A worker's league opponents against a real redis-server: every load returns the picked
snapshot's own weights, the next picks' snapshots come in the same read when games load
often, a snapshot gone between picks fails only its own game, and a new plan drops what was
read ahead of the old one; given the slots' model, each snapshot is fitted to it once a
digest, and every read is still checked against its digest."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from rolloutfleet.data.weights_check import CheckedWeights, WeightsRefused
from rolloutfleet.league import opponents as opponents_module
from rolloutfleet.league.opponents import READ_AHEAD, LeagueOpponents
from rolloutfleet.league.store import PolicyStore
from rolloutfleet.spec.sections.league_spec import LeagueSpec

JOB = "league-opponents"


def state(seed: int) -> dict[str, np.ndarray]:
    return {"pi.weight": np.full((3, 5), float(seed), np.float32), "pi.bias": np.arange(3, dtype=np.float32) + seed}


def league(store: PolicyStore, count: int) -> list[str]:
    names = [f"s{i:03d}" for i in range(count)]
    for i, name in enumerate(names):
        store.snapshot(name, state(i), step=i)
    store.publish_plan(dict.fromkeys(names, 1.0))
    return names


def test_games_that_all_load_read_their_snapshots_ahead_and_each_gets_its_own(redis_url: str) -> None:
    with PolicyStore(redis_url, JOB) as store:
        names = league(store, 200)
        opponents = LeagueOpponents(store, LeagueSpec(opponent="b"), seed=0, worker_index=0)
        for _ in range(400):  # as a worker whose slots never hold the pick: every game loads
            name = opponents.pick()
            assert name is not None
            weights = opponents.load(name)
            seed = names.index(name)
            assert np.array_equal(weights["pi.weight"], state(seed)["pi.weight"])
            assert np.array_equal(weights["pi.bias"], state(seed)["pi.bias"])
        assert opponents.loads == 400
        # Only the first loads waited for Redis; the others' snapshots were asked for at an
        # earlier load, several to a request, and read when due.
        assert opponents.reads <= 2 and 400 / READ_AHEAD < opponents.sent_ahead < 400 / 2
        assert len(opponents._fetched) < READ_AHEAD
        # Names seen under this plan: their weights are read without their metadata (Redis's count).
        admin = redis.Redis.from_url(redis_url)
        seen, sent = set(opponents._known), opponents.sent_ahead
        admin.config_resetstat()
        for _ in range(100):
            name = opponents.pick()
            assert name is not None
            opponents.load(name)
        calls = {k: int(v["calls"]) for k, v in admin.info("commandstats").items()}
        new_names = len(set(opponents._known) - seen)
        assert calls.get("cmdstat_hmget", 0) <= new_names < 100
        # Weights go out with the requests (some carry only the metadata of names new to it).
        assert 0 < calls["cmdstat_mget"] <= opponents.sent_ahead - sent + opponents.reads - 2


def test_a_request_sent_ahead_and_lost_is_read_when_due(redis_url: str) -> None:
    """The connection of the requests sent ahead dies between loads (Redis restarted, a proxy
    dropped it): the snapshots it asked for are read when due, each game still gets its own
    weights, and the next requests go out on a new connection."""
    with PolicyStore(redis_url, JOB + "-lost") as store:
        names = league(store, 60)
        opponents = LeagueOpponents(store, LeagueSpec(opponent="b"), seed=3, worker_index=0)
        admin = redis.Redis.from_url(redis_url)

        def play(games: int) -> None:
            for _ in range(games):
                name = opponents.pick()
                assert name is not None
                assert np.array_equal(opponents.load(name)["pi.bias"], state(names.index(name))["pi.bias"])

        play(30)
        while opponents._pending is None:  # sent when a few of the next picks are not read yet
            play(1)
        early = store.early._connection._sock.getsockname()  # type: ignore[attr-defined]
        assert admin.client_kill(f"{early[0]}:{early[1]}")
        reads = opponents.reads
        play(30)
        assert store.early.failed == 1 and opponents.reads <= reads + 1  # asked again, or read when due
        assert store.early._connection._sock.getsockname() != early  # type: ignore[attr-defined]


def test_games_whose_slots_hold_the_pick_read_one_snapshot_at_a_time(redis_url: str) -> None:
    with PolicyStore(redis_url, JOB + "-held") as store:
        league(store, 50)
        opponents = LeagueOpponents(store, LeagueSpec(opponent="b"), seed=1, worker_index=0)
        picks = [opponents.pick() for _ in range(200)]  # held by a slot: no load
        first = picks[-1]
        assert first is not None
        opponents.load(first)
        assert opponents.reads == 1 and not opponents._fetched  # nothing read ahead for picks rarely loaded


def test_a_snapshot_gone_fails_its_own_game_and_a_new_plan_drops_the_old_read_ahead(redis_url: str) -> None:
    with PolicyStore(redis_url, JOB + "-gone") as store:
        league(store, 20)
        loaded = store.load_many(["s001", "nope", "s002"])
        assert isinstance(loaded["nope"], KeyError) and "nope" in str(loaded["nope"])
        assert np.array_equal(loaded["s002"]["pi.weight"], state(2)["pi.weight"])  # type: ignore[index]
        clock = [0.0]
        spec = LeagueSpec(opponent="b", plan_refresh_seconds=5)
        opponents = LeagueOpponents(store, spec, seed=2, worker_index=0, clock=lambda: clock[0])
        for _ in range(30):
            name = opponents.pick()
            assert name is not None
            opponents.load(name)
        assert opponents._ahead  # picks drawn ahead from the first plan
        store.publish_plan({"s019": 1.0})
        clock[0] = 10.0
        assert {opponents.pick() for _ in range(20)} == {"s019"}  # none of the old plan's read-ahead
        store.retire("s019")
        store.collect()
        with pytest.raises(KeyError, match="s019"):
            opponents.load("s019")


def test_snapshots_are_fitted_to_the_slots_model_once_a_digest_and_every_read_is_checked_against_it(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with PolicyStore(redis_url, JOB + "-fit") as store:
        names = league(store, 4)
        store.snapshot("nan", {"pi.weight": np.full((3, 5), np.nan, np.float32), "pi.bias": np.zeros(3, np.float32)})
        store.publish_plan({**dict.fromkeys(names, 1.0), "nan": 1.0})
        signature = {"pi.weight": ((3, 5), np.dtype("float32")), "pi.bias": ((3,), np.dtype("float32"))}
        fitted: list[bool] = []  # each call of check_weights: whether the weights were the good ones
        real_check = opponents_module.check_weights
        monkeypatch.setattr(
            opponents_module,
            "check_weights",
            lambda w, s: fitted.append(bool(np.isfinite(w["pi.weight"]).all())) or real_check(w, s),
        )
        opponents = LeagueOpponents(store, LeagueSpec(opponent="b"), seed=3, worker_index=0, signature=signature)
        refused = 0
        for _ in range(100):
            name = opponents.pick()
            assert name is not None
            if name == "nan":
                with pytest.raises(WeightsRefused, match="NaN"):
                    opponents.load(name)
                refused += 1
                continue
            weights = opponents.load(name)
            assert isinstance(weights, CheckedWeights) and weights.fits(signature)
            assert np.array_equal(weights["pi.weight"], state(names.index(name))["pi.weight"])
        assert fitted.count(True) == 4  # each good digest once, however often read
        assert 0 < fitted.count(False) <= refused  # the bad one each time it was read (a read serves 1-2 picks)
        # A blob changed under its digest is refused at its next read, fitted before or not.
        digest = store.get("s001").digest
        redis.Redis.from_url(redis_url).set(store.blob_prefix + digest, b"other bytes")
        opponents._fetched.clear()  # nothing read ahead of the change: the next s001 is read after it
        opponents._pending = None
        while opponents.pick() != "s001":
            pass
        with pytest.raises(ValueError, match="do not match their digest"):
            opponents.load("s001")


def test_slots_that_act_only_read_a_default_mlps_acting_part_fitted_to_its_names(redis_url: str) -> None:
    """acting=True (the slots act without their value function): of the default MLP's
    snapshots only what acting needs is read (Redis counts a GETRANGE each, no MGET), each
    fitted to the signature's acting names; other snapshots are read whole and fitted to the
    whole signature."""
    shapes = {"actor_trunk.1.weight": (8, 4), "actor_trunk.1.bias": (8,), "critic_trunk.1.weight": (8, 4),
              "critic_trunk.1.bias": (8,), "pi.weight": (2, 8), "pi.bias": (2,), "vf.weight": (1, 8), "vf.bias": (1,)}  # fmt: skip
    signature = {name: (shape, np.dtype("float32")) for name, shape in shapes.items()}
    acting = {name: spec for name, spec in signature.items() if name.startswith(("actor_trunk.", "pi."))}
    admin = redis.Redis.from_url(redis_url)
    with PolicyStore(redis_url, JOB + "-acting") as store:
        names = [f"m{i}" for i in range(6)]
        for i, name in enumerate(names):
            store.snapshot(name, {key: np.full(shape, float(i), np.float32) for key, shape in shapes.items()})
        store.publish_plan(dict.fromkeys(names, 1.0))
        admin.config_resetstat()
        opponents = LeagueOpponents(store, LeagueSpec(opponent="b"), seed=0, worker_index=0, signature=signature,
                                    acting=True)  # fmt: skip
        for _ in range(40):
            name = opponents.pick()
            assert name is not None
            weights = opponents.load(name)
            assert isinstance(weights, CheckedWeights) and weights.fits(acting) and set(weights) == set(acting)
            assert all(np.all(value == names.index(name)) for value in weights.values())
        calls = {key: value["calls"] for key, value in admin.info("commandstats").items()}
        assert calls["cmdstat_getrange"] >= opponents.loads - READ_AHEAD and "cmdstat_mget" not in calls
        # A snapshot stored whole (no value function of the default MLP's names) is read whole.
        whole_signature = {"pi.weight": ((3, 5), np.dtype("float32")), "pi.bias": ((3,), np.dtype("float32"))}
        store.snapshot("plain", state(1))
        store.publish_plan({"plain": 1.0})
        plain = LeagueOpponents(store, LeagueSpec(opponent="b"), seed=0, worker_index=0, signature=whole_signature,
                                acting=True)  # fmt: skip
        assert plain.pick() == "plain"
        loaded = plain.load("plain")
        assert isinstance(loaded, CheckedWeights) and loaded.fits(whole_signature) and set(loaded) == set(state(1))
