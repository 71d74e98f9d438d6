"""The league's store against a real redis-server: snapshots written once and read back
bit for bit, content-addressed, immutable names, retirement that frees weights only when
nothing refers to them, and ratings replayed from the results stream."""

from __future__ import annotations

import urllib.parse

import numpy as np
import pytest
import redis
import torch

from rolloutfleet.data.codec import decode_tensors
from rolloutfleet.league.matchmaking import Uniform
from rolloutfleet.league.opponents import LeagueOpponents
from rolloutfleet.league.ratings import Elo
from rolloutfleet.league.records import MatchResult, Snapshot
from rolloutfleet.league.standings import Standings, parse_standings
from rolloutfleet.league.store import PolicyStore
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.spec.sections.league_spec import LeagueSpec
from rolloutfleet.transport.league_standings import read_standings_json
from rolloutfleet.transport.redis.acl import job_users, password_hash
from tests.integration.redis_server import RedisServer

JOB = "league"


def state(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"pi.weight": rng.standard_normal((4, 8)).astype(np.float32), "pi.bias": np.zeros(4, np.float32)}


def job_body(name: str) -> dict[str, object]:
    return {"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "metadata": {"name": name},
            "spec": {"env": {"id": "CartPole-v1"}}}  # fmt: skip


def read_standings(redis_url: str, job: RolloutJob) -> Standings | None:
    return parse_standings(read_standings_json(redis_url, job))  # as the operator reads them


def blobs(client: redis.Redis, store: PolicyStore) -> list[bytes]:
    return sorted(client.scan_iter(match=store.blob_prefix + "*"))


def test_a_snapshot_reads_back_as_written_and_its_weights_are_the_codecs_not_a_pickle(redis_url: str) -> None:
    model = torch.nn.Linear(8, 4)
    with PolicyStore(redis_url, JOB) as store:
        meta = store.snapshot("main-0100", model, parent="main-0050", step=100, tags=["gen1"])
        loaded = store.load("main-0100")
        assert set(loaded) == {"weight", "bias"}
        assert np.array_equal(loaded["weight"], model.weight.detach().numpy())
        assert (meta.parent, meta.step, meta.tags) == ("main-0050", 100, ("gen1",))
        assert [s.name for s in store.snapshots()] == ["main-0100"]
        client = redis.Redis.from_url(redis_url)
        (key,) = blobs(client, store)
        raw = client.get(key)
        assert raw is not None and not raw.startswith(b"\x80")  # no pickle protocol header
        assert set(decode_tensors(bytearray(raw))) == {"weight", "bias"}


def test_snapshots_are_content_addressed_and_names_immutable(redis_url: str) -> None:
    with PolicyStore(redis_url, JOB) as store:
        a = store.snapshot("a", state(1), step=1)
        b = store.snapshot("b", state(1), step=2)  # the same weights under another name
        c = store.snapshot("c", state(2), step=3)
        assert a.digest == b.digest != c.digest
        client = redis.Redis.from_url(redis_url)
        assert len(blobs(client, store)) == 2
        with pytest.raises(ValueError, match="name 'a' is taken"):
            store.snapshot("a", state(3))
        assert np.array_equal(store.load("a")["pi.weight"], state(1)["pi.weight"])
        with pytest.raises(KeyError, match="no snapshot 'nope'"):
            store.load("nope")


def mlp_state(seed: int) -> dict[str, np.ndarray]:
    """A default MLP's names: a policy trunk and head, a value trunk and head."""
    rng = np.random.default_rng(seed)
    shapes = {"actor_trunk.1.weight": (8, 4), "actor_trunk.1.bias": (8,), "critic_trunk.1.weight": (8, 4),
              "critic_trunk.1.bias": (8,), "pi.weight": (2, 8), "pi.bias": (2,), "vf.weight": (1, 8), "vf.bias": (1,)}  # fmt: skip
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def test_a_default_mlp_snapshot_reads_whole_or_only_what_acting_needs_each_part_checked(redis_url: str) -> None:
    """The default MLP's weights are stored as two parts, what acting needs first: a whole
    read decodes both; an acting read (load_many and send_ahead) takes only the first bytes,
    checked against their own digest; weights of other names stay one part and an acting read
    takes them whole."""
    client = redis.Redis.from_url(redis_url)
    acting_names = {"actor_trunk.1.weight", "actor_trunk.1.bias", "pi.weight", "pi.bias"}
    with PolicyStore(redis_url, JOB) as store:
        meta = store.snapshot("mlp", mlp_state(1))
        plain = store.snapshot("plain", state(2))
        raw = client.get(store.blob_prefix + meta.digest)
        assert raw is not None and 0 < meta.acting < len(raw) == meta.size and plain.acting == 0
        assert set(decode_tensors(bytearray(raw[: meta.acting]))) == acting_names
        whole = store.load("mlp")
        assert set(whole) == set(mlp_state(1)) and all(np.array_equal(whole[k], v) for k, v in mlp_state(1).items())
        before = client.info("commandstats").get("cmdstat_getrange", {}).get("calls", 0)
        known: dict[str, Snapshot] = {}
        loaded = store.load_many(["mlp", "plain"], known, acting=True)
        assert set(loaded["mlp"]) == acting_names and set(loaded["plain"]) == set(state(2))
        assert np.array_equal(loaded["mlp"]["pi.weight"], mlp_state(1)["pi.weight"])
        assert client.info("commandstats")["cmdstat_getrange"]["calls"] == before + 1  # the split one only
        pending = store.send_ahead(["mlp"], known, acting=True)
        assert pending is not None and set(pending.receive()["mlp"]) == acting_names
        # The acting part is checked on its own: bytes changed there are refused, by name.
        client.setrange(store.blob_prefix + meta.digest, meta.acting - 4, b"\x00\x01\x02\x03")
        with pytest.raises(ValueError, match="snapshot 'mlp': the acting part of its weights does not match"):
            raise store.load_many(["mlp"], known, acting=True)["mlp"]  # type: ignore[misc]
        client.delete(store.blob_prefix + meta.digest)
        gone = store.load_many(["mlp"], known, acting=True)["mlp"]
        assert isinstance(gone, KeyError) and "are gone" in str(gone) and "mlp" not in known


def test_on_a_redis_cluster_acting_parts_and_whole_blobs_come_in_one_round_trip(cluster_url: str) -> None:
    """Every blob of a league shares its job's hash tag: on a real Redis Cluster the GETRANGEs
    and the MGET of a read go to one node together, synchronous or sent ahead."""
    acting_names = {"actor_trunk.1.weight", "actor_trunk.1.bias", "pi.weight", "pi.bias"}
    with PolicyStore(cluster_url, JOB + "-cluster") as store:
        for name, weights in (("a", mlp_state(1)), ("b", mlp_state(2)), ("plain", state(3))):
            store.snapshot(name, weights)
        known: dict[str, Snapshot] = {}
        loaded = store.load_many(["a", "b", "plain"], known, acting=True)
        assert set(loaded["a"]) == set(loaded["b"]) == acting_names and set(loaded["plain"]) == set(state(3))
        assert np.array_equal(loaded["b"]["pi.weight"], mlp_state(2)["pi.weight"])
        pending = store.send_ahead(["a", "b", "plain"], known, acting=True)
        assert pending is not None
        again = pending.receive()
        assert set(again["a"]) == acting_names and np.array_equal(again["plain"]["pi.bias"], state(3)["pi.bias"])


def test_retired_weights_go_once_no_match_and_no_other_name_holds_them(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    with PolicyStore(redis_url, JOB) as store:
        store.snapshot("old", state(1))
        store.snapshot("twin", state(1))
        store.snapshot("played", state(2))
        store.pin(["played"])  # an open match plays it
        store.publish_plan({"played": 1, "twin": 1})
        assert store.retire("old") == []  # "twin" shares its weights
        assert store.retire("played") == []  # the open match refers to it
        assert store.plan() == {"twin": 1.0}  # and workers no longer pick it
        with pytest.raises(ValueError, match="'played' is retired and its weights not yet collected"):
            store.snapshot("played", state(4))
        assert [s.name for s in store.snapshots()] == ["twin"]
        assert sorted(s.name for s in store.snapshots(retired=True)) == ["old", "played"]
        assert len(blobs(client, store)) == 2
        assert store.unpin(["played"]) == ["played"]  # the match ended: its weights go
        assert len(blobs(client, store)) == 1
        assert sorted(store.retire("twin")) == ["old", "twin"]
        assert blobs(client, store) == [] and store.snapshots(retired=True) == []
        with pytest.raises(KeyError, match="no snapshot 'twin'"):
            store.retire("twin")
        store.snapshot("twin", state(3))  # collected: the name is free again


def test_ratings_and_mains_records_from_the_results_stream(redis_url: str) -> None:
    with PolicyStore(redis_url, JOB) as store:
        for seed, name in enumerate(("v1", "v2")):
            store.snapshot(name, state(seed))
        seats = ("first", "second")
        for main_return, opponent in ((1, "v1"), (1, "v1"), (1, "v1"), (0, "v2"), (-1, "v2")):
            store.record_result(MatchResult(dict(zip(seats, ("main", opponent), strict=True)),
                                            dict(zip(seats, (main_return, -main_return), strict=True)), worker=0))  # fmt: skip
        results = store.results()
        assert len(results) == 5 and results[0][1].winner == "main" and results[3][1].winner is None
        table = store.ratings()
        assert table.rating("main") > 1000 > table.rating("v1")
        assert table.games["main"] == 5 and table.draws["v2"] == 1 and table.wins["v2"] == 1
        league = store.league("main")
        assert league.snapshots == ("v1", "v2")
        assert (league.record("v1").wins, league.record("v2").draws, league.record("v2").losses) == (3, 1, 1)
        # The learner's plan comes with the standings the operator shows, in one value it reads.
        assert read_standings(redis_url, RolloutJob.from_dict(job_body(JOB))) is None
        store.publish_matchmaker_plan(Uniform(), "main")
        standings = read_standings(redis_url, RolloutJob.from_dict(job_body(JOB)))
        assert standings is not None and (standings.main, standings.matches, standings.snapshots) == ("main", 5, 2)
        assert standings.main_rating == table.rating("main") and standings.top[0][0] == table.table()[0][0]
        # A learner that keeps its own Elo table (no replay of the stream) publishes that.
        kept = Elo()
        kept.record({"main": 1.0, "v1": -1.0})
        published = store.publish_standings("main", ratings=kept, matches=1, snapshots=2)
        assert read_standings(redis_url, RolloutJob.from_dict(job_body(JOB))) == published
        assert (published.matches, published.main_rating) == (1, kept.rating("main"))


def test_a_result_naming_different_seats_is_refused() -> None:
    with pytest.raises(ValueError, match="name different seats"):
        MatchResult({"a": "main", "b": "v1"}, {"a": 1.0, "c": 0.0})


def test_a_jobs_learner_user_keeps_its_league_and_its_worker_user_cannot_write_it(own_redis: RedisServer) -> None:
    """The per-job users the operator mints (rolloutfleet.transport.redis.acl): the league's
    commands are all among the learner's; the worker's user is refused."""
    admin = own_redis.client()
    users = job_users("team-a", JOB)
    for user in (users.worker, users.learner):
        admin.execute_command("ACL", "SETUSER", *user.setuser_args([password_hash("pw")]))

    def url(user: str) -> str:
        return f"redis://{urllib.parse.quote(user, safe='')}:pw@127.0.0.1:{own_redis.port}/0"

    with PolicyStore(url(users.learner.name), JOB, "team-a") as store:
        store.snapshot("v1", state(1))
        store.snapshot("v2", state(2))
        store.snapshot("v3", mlp_state(3))
        store.pin(["v1"])
        assert store.retire("v1") == [] and store.unpin(["v1"]) == ["v1"]
        store.record_result(MatchResult({"a": "main", "b": "v2"}, {"a": 1.0, "b": 0.0}))
        assert store.ratings().wins["main"] == 1 and np.array_equal(store.load("v2")["pi.bias"], np.zeros(4))
        store.publish_plan({"v2": 1})
    # A worker reads the plan and the snapshots and records its games, and writes nothing else.
    with PolicyStore(url(users.worker.name), JOB, "team-a") as store:
        opponents = LeagueOpponents(store, LeagueSpec(opponent="b"), seed=0, worker_index=3)
        assert opponents.pick() == "v2" and np.array_equal(opponents.load("v2")["pi.weight"], state(2)["pi.weight"])
        split = store.load_many(["v3"], acting=True)["v3"]  # a default MLP's acting part: GETRANGE
        assert not isinstance(split, Exception) and "vf.weight" not in split and "pi.weight" in split
        opponents.finished({"x": "main", "o": "v2"}, {"x": 0.0, "o": 0.0})
        assert opponents.flush() == 1
        (_, fields) = admin.xrevrange(store.results_key, count=1)[0]
        assert MatchResult.from_fields(fields).worker == 3
        with pytest.raises(redis.exceptions.NoPermissionError):
            store.snapshot("v4", state(4))
        with pytest.raises(redis.exceptions.NoPermissionError):
            store.publish_plan({"v2": 2})
