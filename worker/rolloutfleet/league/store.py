"""A league's frozen policies and its match results, in Redis (the job's keys).

    >>> store = PolicyStore("redis://127.0.0.1:6379/0", "tictactoe")          # doctest: +SKIP
    >>> store.snapshot("main-0100", model, parent="main-0050", step=100)      # doctest: +SKIP
    >>> state = store.load("main-0100")           # name -> numpy array       # doctest: +SKIP
    >>> store.record_result(MatchResult({"first": "main", "second": "main-0100"}, {"first": 1.0, "second": -1.0}))

A snapshot is immutable and content-addressed: its weights are one value named by their
SHA-256 (``<job tag>:league:blob:<digest>``, encoded by :mod:`rolloutfleet.data.codec`, never
pickled), written once however many names share them; its metadata (name, digest, parent,
step, tags, size, time) is a field of ``<job tag>:league:snapshots``. The default MLP's
weights are encoded in two parts, what acting needs first (its metadata says how many bytes,
with their own SHA-256), so a worker whose opponent's rows go nowhere reads and checks only
those (``GETRANGE``, about half). A name is taken once:
a second snapshot under it is refused. :meth:`PolicyStore.retire` takes a snapshot out of
the league; its weights are deleted once no open match refers to them (:meth:`pin`,
:meth:`unpin`) and no other name shares them (:meth:`collect`, run by ``retire`` and
``unpin``). Results are entries of the stream ``<job tag>:league:results``: each seat's
policy and return, as JSON; :meth:`ratings` replays them into an :class:`~.ratings.Elo`
table and :meth:`league` into main's record against each snapshot.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from rolloutfleet.data.codec import encode_tensors
from rolloutfleet.inference.default_mlp import acting_part
from rolloutfleet.league.matchmaking import League, Record
from rolloutfleet.league.ratings import DEFAULT_INITIAL, DEFAULT_K, Elo, pair_score
from rolloutfleet.league.reads import BlobReads, Loaded, PendingRead, take_metadata
from rolloutfleet.league.records import MatchResult, Snapshot
from rolloutfleet.league.standings import Standings, standings_of
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.league_standings import standings_key
from rolloutfleet.transport.redis.connection import DEFAULT_RECONNECT_TIMEOUT_S, JobClient, node_client
from rolloutfleet.transport.redis.early import EarlyRequests
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WEIGHTS_SOCKET_TIMEOUT_S, to_numpy_state

MAX_SNAPSHOT_BYTES = 512 << 20
"""Redis's limit of one value."""
RESULTS_MAXLEN = 100_000
"""Games the results stream keeps (about: trimmed as Redis finds cheap); ratings and records
replay what it keeps."""

# KEYS: snapshots hash, blob, retired hash. ARGV: name, metadata JSON, payload.
# Returns 0 (the name is taken), -1 (retired, weights not yet collected) or 1.
_SNAPSHOT_LUA = """
if redis.call('HGET', KEYS[1], ARGV[1]) then
  return 0
end
if redis.call('HGET', KEYS[3], ARGV[1]) then
  return -1
end
redis.call('SET', KEYS[2], ARGV[3], 'NX')
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# KEYS: snapshots hash, retired hash, refs hash. ARGV: blob key prefix.
# Deletes the blobs of retired snapshots that no active snapshot shares and no open match
# refers to; forgets those retired names. Returns the names whose weights went.
_COLLECT_LUA = """
local active = {}
local snaps = redis.call('HGETALL', KEYS[1])
for i = 2, #snaps, 2 do
  active[cjson.decode(snaps[i])['digest']] = true
end
local gone = {}
local retired = redis.call('HGETALL', KEYS[2])
for i = 1, #retired, 2 do
  local name, meta = retired[i], cjson.decode(retired[i + 1])
  local digest = meta['digest']
  local refs = tonumber(redis.call('HGET', KEYS[3], digest) or '0')
  if not active[digest] and refs <= 0 then
    redis.call('DEL', ARGV[1] .. digest)
    redis.call('HDEL', KEYS[3], digest)
    redis.call('HDEL', KEYS[2], name)
    table.insert(gone, name)
  end
end
return gone
"""


# KEYS: refs hash. ARGV: +1 or -1, digests... Counts open matches per digest (a count that
# reaches 0 is removed).
_REFS_LUA = """
for i = 2, #ARGV do
  local n = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0') + tonumber(ARGV[1])
  if n > 0 then
    redis.call('HSET', KEYS[1], ARGV[i], n)
  else
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return 1
"""

# The league uses only commands a job's learner user has (rolloutfleet.transport.redis.acl):
# HGET, HGETALL, HSET, HDEL, GET, SET, DEL, XADD, XRANGE, scripts and MULTI; a worker's reads
# of snapshots (HMGET, MGET, GETRANGE) and its results (XADD) are in the worker user's list too.


class PolicyStore(JobClient):
    """The league of job ``namespace/job``: snapshots, retirement, results (see the module doc)."""

    def __init__(
        self,
        redis_url: str,
        job: str | RolloutJob,
        namespace: str = "default",
        *,
        password: str | None = None,
        reconnect_timeout_s: float = DEFAULT_RECONNECT_TIMEOUT_S,
        socket_timeout_s: float = WEIGHTS_SOCKET_TIMEOUT_S,
        client: Any = None,
    ) -> None:
        if isinstance(job, RolloutJob):
            namespace, job = job.namespace, job.name
        keys = job_keys(namespace, job)
        self.snapshots_key = f"{keys.tag}:league:snapshots"
        self.retired_key = f"{keys.tag}:league:retired"
        self.refs_key = f"{keys.tag}:league:refs"
        self.blob_prefix = f"{keys.tag}:league:blob:"
        self.results_key = f"{keys.tag}:league:results"
        self.plan_key = f"{keys.tag}:league:plan"
        self.standings_key = standings_key(keys.tag)
        super().__init__(
            redis_url,
            password,
            reconnect_timeout_s=reconnect_timeout_s,
            socket_timeout_s=socket_timeout_s,
            client=client,
        )
        self._snapshot = self.client.register_script(_SNAPSHOT_LUA)
        self._collect = self.client.register_script(_COLLECT_LUA)
        self._refs = self.client.register_script(_REFS_LUA)
        self.early = EarlyRequests(self.client, self.blob_prefix)
        """:meth:`send_ahead`'s connection."""

    # -- snapshots --------------------------------------------------------------------------

    def snapshot(
        self, name: str, weights: Any, *, parent: str | None = None, step: int = 0, tags: Iterable[str] = ()
    ) -> Snapshot:
        """Freeze ``weights`` (a module, a state dict, or name -> array) as snapshot ``name``.
        A name already in the league (active or retired and not yet collected) is refused."""
        if not name or any(ch in name for ch in "\n\r"):
            raise ValueError(f"a snapshot name must be one non-empty line, got {name!r}")
        state = to_numpy_state(weights)
        acting = acting_part(state)
        if 0 < len(acting) < len(state):  # what acting needs first, readable on its own
            head = encode_tensors(acting)
            payload = head + encode_tensors({key: value for key, value in state.items() if key not in acting})
            split = (len(head), hashlib.sha256(head).hexdigest())
        else:
            payload, split = encode_tensors(state), (0, "")
        if len(payload) > MAX_SNAPSHOT_BYTES:
            raise ValueError(f"snapshot {name!r} is {len(payload)} bytes, more than Redis' {MAX_SNAPSHOT_BYTES}")
        digest = hashlib.sha256(payload).hexdigest()
        meta = Snapshot(name, digest, int(step), parent, tuple(tags), len(payload), time.time(), *split)
        made = self._retry.call(
            lambda: self._snapshot(
                keys=[self.snapshots_key, self.blob_prefix + digest, self.retired_key],
                args=[name, meta.to_json(), payload],
                client=self.client,
            )
        )
        if int(made) == -1:
            raise ValueError(f"snapshot name {name!r} is retired and its weights not yet collected: use another")
        if not int(made):
            raise ValueError(f"snapshot name {name!r} is taken: snapshots are immutable, give the new one a new name")
        return meta

    def snapshots(self, *, retired: bool = False) -> list[Snapshot]:
        """The active snapshots (``retired``: the retired ones whose weights are still held),
        by step, then name."""
        raw = self._retry.call(lambda: self.client.hgetall(self.retired_key if retired else self.snapshots_key))
        return sorted((Snapshot.from_json(item) for item in raw.values()), key=lambda s: (s.step, s.name))

    def get(self, name: str) -> Snapshot:
        raw = self._retry.call(lambda: self.client.hget(self.snapshots_key, name))
        if raw is None:
            raise KeyError(f"no snapshot {name!r} in the league {self.snapshots_key}")
        return Snapshot.from_json(raw)

    def load(self, name: str) -> dict[str, np.ndarray]:
        """Snapshot ``name``'s weights (name -> array), checked against its digest."""
        loaded = self.load_many([name])[name]
        if isinstance(loaded, Exception):
            raise loaded
        return loaded

    def load_many(
        self, names: Sequence[str], known: dict[str, Snapshot] | None = None, *, acting: bool = False
    ) -> dict[str, Loaded]:
        """Several snapshots' weights, each checked against its digest, in two round trips:
        their metadata, then their weights (one MGET). ``known``: name -> metadata already
        read (a worker's, kept while its plan stands); the metadata of those is not read
        again, and this call adds what it read. ``acting``: only what acting needs, of the
        snapshots whose weights are split so (the default MLP's, without its value function;
        one GETRANGE each), checked against its own digest. A snapshot or weights that are
        gone, or weights that miss their digest, map to the error (``KeyError``, ``ValueError``)."""
        known = {} if known is None else known
        unique = list(dict.fromkeys(names))
        loaded: dict[str, Loaded] = {}
        unknown = [name for name in unique if name not in known]
        if unknown:
            raw = self._retry.call(lambda: self.client.hmget(self.snapshots_key, unknown))
            loaded.update(take_metadata(self.snapshots_key, unknown, raw, known))
        wanted = {name: known[name] for name in unique if name not in loaded}
        if not wanted:
            return loaded
        reads = BlobReads(self.blob_prefix, wanted, acting)
        if len(reads.commands) == 1 and reads.whole:
            answers = [self._retry.call(lambda: self.client.mget(reads.commands[0][1:]))]
        else:

            def read() -> list[Any]:  # on a cluster, on the node of the job's hash tag: one slot, one node
                pipe = node_client(self.client, self.blob_prefix).pipeline(transaction=False)
                for name, key, *rest in reads.commands:
                    if name == "MGET":
                        pipe.mget([key, *rest])
                    else:
                        pipe.getrange(key, *rest)
                return pipe.execute()

            answers = self._retry.call(read)
        loaded.update(reads.verified(answers, known))
        return loaded

    def send_ahead(
        self, names: Sequence[str], known: dict[str, Snapshot], *, acting: bool = False
    ) -> PendingRead | None:
        """Ask for snapshots without waiting for the answer: the weights of those of ``names``
        whose metadata ``known`` holds (``acting``: as :meth:`load_many`), and the metadata of
        the others, in one write (:class:`~rolloutfleet.transport.redis.early.EarlyRequests`).
        Read the answer with :meth:`PendingRead.receive` when the snapshots are due. One is in
        flight at a time (a second call drops the first's answer). None: nothing to ask, or
        the request could not be sent (read those snapshots with :meth:`load_many` as usual)."""
        unique = list(dict.fromkeys(names))
        reads = BlobReads(self.blob_prefix, {name: known[name] for name in unique if name in known}, acting)
        unknown = [name for name in unique if name not in known]
        commands = ([("HMGET", self.snapshots_key, *unknown)] if unknown else []) + reads.commands
        request = self.early.send(*commands) if commands else None
        return None if request is None else PendingRead(self.early, request, self.snapshots_key, unknown, reads, known)

    def close(self) -> None:
        self.early.close()
        super().close()

    def retire(self, name: str) -> list[str]:
        """Take ``name`` out of the league (and out of the plan, if it is in it); returns the
        snapshots whose weights went (this one unless an open match or another name holds
        them)."""

        def move() -> None:
            raw = self.client.hget(self.snapshots_key, name)
            if raw is None:
                raise KeyError(f"no snapshot {name!r} in the league {self.snapshots_key}")
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(self.retired_key, name, raw)
            pipe.hdel(self.snapshots_key, name)
            pipe.execute()

        self._retry.call(move)
        plan = self.plan()
        if name in plan:  # workers stop picking it at their next read of the plan
            self.publish_plan({other: weight for other, weight in plan.items() if other != name})
        return self.collect()

    def collect(self) -> list[str]:
        """Delete the weights of retired snapshots that nothing refers to any more."""
        gone = self._retry.call(
            lambda: self._collect(
                keys=[self.snapshots_key, self.retired_key, self.refs_key], args=[self.blob_prefix], client=self.client
            )
        )
        return [item.decode() if isinstance(item, bytes) else str(item) for item in gone]

    def pin(self, names: Sequence[str]) -> None:
        """An open match refers to these snapshots: their weights stay until :meth:`unpin`."""
        digests = [self.get(name).digest for name in names]
        self._retry.call(lambda: self._refs(keys=[self.refs_key], args=[1, *digests], client=self.client))

    def unpin(self, names: Sequence[str]) -> list[str]:
        """The match that pinned these snapshots (active or retired) is over."""
        digests = []
        for name in names:
            raw = self.client.hget(self.snapshots_key, name) or self.client.hget(self.retired_key, name)
            if raw is None:
                raise KeyError(f"no snapshot {name!r} in the league {self.snapshots_key}, active or retired")
            digests.append(Snapshot.from_json(raw).digest)
        self._retry.call(lambda: self._refs(keys=[self.refs_key], args=[-1, *digests], client=self.client))
        return self.collect()

    # -- the plan: which snapshots workers play, how likely ---------------------------------

    def publish_plan(self, weights: Mapping[str, float]) -> dict[str, float]:
        """Tell the workers which snapshots to play and how likely each is (normalized here;
        names not in the league are refused). ``{}``: play the opponent policy as it is."""
        active = {s.name for s in self.snapshots()}
        unknown = sorted(set(weights) - active)
        if unknown:
            more = f" and {len(unknown) - 8} more" if len(unknown) > 8 else ""
            raise KeyError(f"not in the league {self.snapshots_key}: {', '.join(unknown[:8])}{more}")
        if any(not value >= 0 for value in weights.values()):
            raise ValueError(f"plan weights must be >= 0, got {dict(weights)}")
        total = float(sum(weights.values()))
        plan = {name: float(value) / total for name, value in weights.items() if value > 0} if total > 0 else {}
        self._retry.call(lambda: self.client.set(self.plan_key, json.dumps({"weights": plan, "at": time.time()})))
        return plan

    def publish_matchmaker_plan(self, matchmaker: Any, main: str) -> dict[str, float]:
        """The plan a matchmaker (:mod:`.matchmaking`) makes of main's record so far; the
        standings of the same results are published with it (:meth:`publish_standings`)."""
        results = [result for _, result in self.results()]
        league = self.league(main, results=results)
        weights = matchmaker.weights(league)
        plan = self.publish_plan(dict(zip(league.snapshots, (float(w) for w in weights), strict=True)))
        self.publish_standings(main, results=results, snapshots=len(league.snapshots))
        return plan

    def publish_standings(
        self,
        main: str,
        *,
        results: Sequence[MatchResult] | None = None,
        snapshots: int | None = None,
        ratings: Elo | None = None,
        matches: int | None = None,
    ) -> Standings:
        """The Elo standings of every result (or ``results``, read before; or ``ratings``, an
        Elo table the learner keeps itself, of ``matches`` games), for the job's status: the
        operator shows the best policies and ``main``'s rating."""
        if ratings is None:
            played = [result for _, result in self.results()] if results is None else results
            ratings, matches = self.ratings(results=played), len(played)
        count = len(self.snapshots()) if snapshots is None else snapshots
        total = sum(ratings.games.values()) // 2 if matches is None else matches
        standings = standings_of(ratings, main, snapshots=count, matches=total)
        self._retry.call(lambda: self.client.set(self.standings_key, standings.to_json()))
        return standings

    def plan(self) -> dict[str, float]:
        """The plan the learner published last (``{}``: none)."""
        raw = self._retry.call(lambda: self.client.get(self.plan_key))
        if raw is None:
            return {}
        return {str(name): float(value) for name, value in json.loads(raw)["weights"].items()}

    # -- results ------------------------------------------------------------------------------

    def record_result(self, result: MatchResult) -> str:
        """Append a finished match to the results stream; returns its entry id."""
        entry = self._retry.call(
            lambda: self.client.xadd(self.results_key, result.fields(), maxlen=RESULTS_MAXLEN, approximate=True)  # type: ignore[arg-type]
        )
        return entry.decode() if isinstance(entry, bytes) else str(entry)

    def results(self, start: str = "-", count: int | None = None) -> list[tuple[str, MatchResult]]:
        """Results from entry ``start`` on (oldest first)."""
        raw = cast(
            "list[tuple[bytes, dict[bytes, bytes]]]",
            self._retry.call(lambda: self.client.xrange(self.results_key, min=start, count=count)),
        )
        return [(eid.decode(), MatchResult.from_fields(fields)) for eid, fields in raw]

    def ratings(
        self, *, k: float = DEFAULT_K, initial: float = DEFAULT_INITIAL, results: Iterable[MatchResult] | None = None
    ) -> Elo:
        """Every recorded result (or ``results``, read before) replayed into an Elo table, in
        the stream's order."""
        table = Elo(k=k, initial=initial)
        played = (r for _, r in self.results()) if results is None else results
        table.record_all(result.policy_returns() for result in played)
        return table

    def league(self, main: str, *, results: Iterable[MatchResult] | None = None) -> League:
        """What a matchmaker needs: the active snapshots and main's record against each (from
        every result, or ``results``, read before)."""
        records: dict[str, Record] = {}
        for result in (r for _, r in self.results()) if results is None else results:
            returns = result.policy_returns()
            if main not in returns:
                continue
            for opponent, value in returns.items():
                if opponent != main:
                    records[opponent] = records.get(opponent, Record()).add(pair_score(returns[main], value))
        return League(main=main, snapshots=tuple(s.name for s in self.snapshots()), stats=records)
