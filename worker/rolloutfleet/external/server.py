"""The action endpoint: aiohttp on its own thread and event loop, JSON in and out.

Every call names its client (header ``X-Rolloutfleet-Client``); the paths follow RLlib's
verbs (:mod:`rolloutfleet.client` is the other side)::

    POST   /v1/episodes                 {}                          -> {"episode_id": 17}
    POST   /v1/episodes/17/action       {"obs": [...]}              -> {"action": 1, "weights_seq_no": 3}
    POST   /v1/episodes/17/returns      {"reward": 1.0}             -> {}
    POST   /v1/episodes/17/end          {"obs": [...], "truncated": false} -> {}
    DELETE /v1/clients/<id>                                         -> {}
    GET    /v1/info                                                 -> spaces, limits
    GET    /v1/policy                   (inference="local")         -> weights to act with
    POST   /v1/episodes/17/rows         {"rows": [...], "end": null} -> {"weights_seq_no": 4}

Observations waiting for an action are answered together: one forward pass for all of
them (:meth:`ActionServer._infer`). A refused call answers ``{"error": "<one line>"}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import numpy as np
from aiohttp import web
from gymnasium.spaces import Space

from rolloutfleet.external.book import Episode, EpisodeBook, Step
from rolloutfleet.sampling.env.external_spaces import (
    BadInput,
    ExternalError,
    Refused,
    ServerFailed,
    TooLarge,
    UnknownEpisode,
    parse_obs,
    parse_reward,
)

log = logging.getLogger("rolloutfleet.external.server")

CLIENT_HEADER = "X-Rolloutfleet-Client"
MAX_BODY_BYTES = 16 << 20
ROOM_POLL_S = 0.005


class LocalHooks(NamedTuple):
    """What ``inference="local"`` clients are served by (called under the server's lock)."""

    policy: Callable[[], dict[str, Any]]
    """The weights to act with (:func:`rolloutfleet.external.local_inference.local_policy`)."""
    parse: Callable[[dict[str, Any]], tuple[list[tuple[Step, float, np.ndarray]], str | None]]
    """Shipped rows checked (:func:`rolloutfleet.external.local_inference.parse_shipped`)."""
    newest: Callable[[], int]
    """The weights version the worker acts with now."""


ActBatch = Callable[[np.ndarray], list[Step]]
"""Actions for a batch of (filtered) observations, one :class:`Step` each (one forward pass)."""
Prepare = Callable[[np.ndarray], np.ndarray]
"""A parsed observation as recorded and acted on (the meanStd filter, if any)."""


class ActionServer:
    """The routes over an :class:`EpisodeBook`; ``lock`` guards the book and the policy."""

    def __init__(
        self,
        book: EpisodeBook,
        lock: threading.Lock,
        act: ActBatch,
        prepare: Prepare,
        answer: Callable[[np.ndarray], Any],
        observation_space: Space[Any],
        info: dict[str, Any],
        max_ready: int = 1 << 30,
        local: LocalHooks | None = None,
    ) -> None:
        """``answer``: an action as the client gets it (JSON-ready; clipped with ``clipActions``)."""
        self.book, self.lock, self.act, self.prepare, self.info = book, lock, act, prepare, info
        self.answer, self.space = answer, observation_space
        self.rows_ready: Callable[[], None] = lambda: None
        """Called (under ``lock``) whenever rows were released: the runner's wake-up."""
        self._pending: list[tuple[Episode, np.ndarray, asyncio.Future[Step]]] = []
        self._wake: asyncio.Event | None = None
        self.max_ready = max_ready
        self.local = local
        self.passes = 0
        self.acted = 0
        self.waits = 0
        """Actions that waited for room (backpressure)."""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_json_errors])
        app.router.add_post("/v1/episodes", self._start_episode)
        app.router.add_post("/v1/episodes/{eps}/action", self._get_action)
        app.router.add_post("/v1/episodes/{eps}/returns", self._log_returns)
        app.router.add_post("/v1/episodes/{eps}/end", self._end_episode)
        app.router.add_post("/v1/episodes/{eps}/rows", self._ship_rows)
        app.router.add_get("/v1/policy", self._policy)
        app.router.add_delete("/v1/clients/{client}", self._leave)
        app.router.add_get("/v1/info", self._info)
        return app

    # -- routes ----------------------------------------------------------------------

    async def _start_episode(self, request: web.Request) -> web.Response:
        try:
            client = _client(request)
            await _body(request)  # nothing to say here, but what is sent must be a JSON object
            with self.lock:
                slot = self.book.client(client, time.monotonic())
                eps_id = self.book.start(slot, time.monotonic())
        except ExternalError as exc:
            return _error(exc)
        return web.json_response({"episode_id": eps_id})

    async def _get_action(self, request: web.Request) -> web.Response:
        async def call(episode: Episode, body: dict[str, Any]) -> dict[str, Any]:
            obs = self.prepare(parse_obs(self.space, body.get("obs")))
            await self._room(episode)
            with self.lock:
                self.book.observe(episode, obs)
            step = await self._queue(episode, obs)
            return {"action": self.answer(step.action), "weights_seq_no": step.seq_no}

        return await self._episode_call(request, call)

    async def _log_returns(self, request: web.Request) -> web.Response:
        async def call(episode: Episode, body: dict[str, Any]) -> dict[str, Any]:
            reward = parse_reward(body.get("reward"))
            with self.lock:
                self.book.log_returns(episode, reward)
            return {}

        return await self._episode_call(request, call)

    async def _end_episode(self, request: web.Request) -> web.Response:
        async def call(episode: Episode, body: dict[str, Any]) -> dict[str, Any]:
            obs = self.prepare(parse_obs(self.space, body.get("obs")))
            truncated = body.get("truncated", False)
            if not isinstance(truncated, bool):
                raise BadInput(f"truncated: expected true or false, got {truncated!r:.80}")
            with self.lock:
                self.book.end(episode, obs, truncated)
                self.rows_ready()
            return {}

        return await self._episode_call(request, call)

    async def _ship_rows(self, request: web.Request) -> web.Response:
        async def call(episode: Episode, body: dict[str, Any]) -> dict[str, Any]:
            if self.local is None:
                raise BadInput("this server takes no rows (inference='local' is not served)")
            with self.lock:
                rows, end = self.local.parse(body)
            await self._room(episode)
            with self.lock:
                self.book.add_rows(episode, rows, end)
                self.rows_ready()
                return {"weights_seq_no": self.local.newest()}

        return await self._episode_call(request, call)

    async def _policy(self, request: web.Request) -> web.Response:
        try:
            if self.local is None:
                raise BadInput("this server gives no weights (inference='local' is not served)")
            with self.lock:
                payload = self.local.policy()
        except ExternalError as exc:
            return _error(exc)
        return web.json_response(payload)

    async def _leave(self, request: web.Request) -> web.Response:
        with self.lock:
            self.book.leave(request.match_info["client"])
        return web.json_response({})

    async def _info(self, request: web.Request) -> web.Response:
        return web.json_response(self.info)

    async def _episode_call(self, request: web.Request, call: Callable[[Episode, dict[str, Any]], Any]) -> web.Response:
        """Look the episode up and run ``call``; bad input drops the episode (counted) and says so."""
        eps_id: int | None = None
        try:
            client = _client(request)
            eps_id = _episode_id(request)
            with self.lock:
                self.book.client(client, time.monotonic())
                episode = self.book.get(eps_id, time.monotonic())
            body = await _body(request)
            return web.json_response(await call(episode, body))
        except BadInput as exc:
            if eps_id is not None:
                with self.lock:
                    self.book.counters.calls_refused += 1
                    dropped = eps_id in self.book.episodes
                    self.book.drop(eps_id, str(exc))
                if dropped:
                    log.warning("episode %d dropped: %s", eps_id, exc)
                    return _error(type(exc)(f"{exc} (episode {eps_id} dropped)"))  # its status kept (413)
            return _error(exc)
        except ExternalError as exc:
            if not isinstance(exc, Refused):  # a full server counts clients_refused
                with self.lock:
                    self.book.counters.calls_refused += 1
            return _error(exc)

    async def _room(self, episode: Episode) -> None:
        """Backpressure: while :attr:`max_ready` rows wait for the worker (its publish blocked
        by a full stream, a learner behind), actions wait too, as stepped envs would; the
        simulators slow down instead of piling up experience from ever older weights."""
        if len(self.book.ready) < self.max_ready:
            return
        self.waits += 1
        while len(self.book.ready) >= self.max_ready and not self.book.stopping:
            episode.last_seen = time.monotonic()  # waiting on the worker is not a vanished client
            await asyncio.sleep(ROOM_POLL_S)

    # -- batched inference -------------------------------------------------------------

    async def _queue(self, episode: Episode, obs: np.ndarray) -> Step:
        future: asyncio.Future[Step] = asyncio.get_running_loop().create_future()
        self._pending.append((episode, obs, future))
        assert self._wake is not None
        self._wake.set()
        return await future

    async def infer_forever(self) -> None:
        """Answer every waiting observation with one forward pass, again and again."""
        self._wake = asyncio.Event()
        while True:
            await self._wake.wait()
            self._wake.clear()
            pending, self._pending = self._pending, []
            if pending:
                self._infer(pending)
            await asyncio.sleep(0)  # let the requests that came in meanwhile queue up

    def _infer(self, pending: list[tuple[Episode, np.ndarray, asyncio.Future[Step]]]) -> None:
        with self.lock:
            try:
                steps = self.act(np.stack([obs for _, obs, _ in pending]))
            except Exception as exc:  # a model's error is the waiting calls' answer, not the server's end
                log.exception("the forward pass raised")
                for episode, _, future in pending:
                    self.book.drop(episode.eps_id, f"the policy failed: {type(exc).__name__}: {exc}")
                    future.set_exception(ServerFailed(f"the policy failed: {type(exc).__name__}: {exc}"))
                return
            self.passes += 1
            self.acted += len(pending)
            for (episode, _, future), step in zip(pending, steps, strict=True):
                if self.book.episodes.get(episode.eps_id) is episode:
                    self.book.acted(episode, step)
                if not future.done():
                    future.set_result(step)
            self.rows_ready()

    async def expire_forever(self, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            with self.lock:
                closed = self.book.expire(time.monotonic())
                if closed:
                    self.rows_ready()
            for eps_id in closed:
                log.warning("episode %d: its client was silent for %g s; closed as truncated", eps_id,
                            self.book.timeout_s)  # fmt: skip


def _client(request: web.Request) -> str:
    client = request.headers.get(CLIENT_HEADER, "")
    if not client or len(client) > 128:
        raise BadInput(f"header {CLIENT_HEADER}: every call names its client (1 to 128 characters)")
    return client


def _episode_id(request: web.Request) -> int:
    raw = request.match_info["eps"]
    try:
        return int(raw)
    except ValueError:
        raise UnknownEpisode(f"unknown episode id {raw!r:.40}: episode ids are integers") from None


async def _body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object (an empty body: ``{}``); :class:`BadInput` for anything else,
    :class:`TooLarge` past ``MAX_BODY_BYTES`` (a Content-Length that says so is refused before
    a byte is read), and a nesting too deep for the parser is refused, not a traceback."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise TooLarge(f"request body: {request.content_length:,} bytes, above the server's {MAX_BODY_BYTES:,}")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise TooLarge(f"request body: above the server's {MAX_BODY_BYTES:,} bytes") from None
    try:
        body = json.loads(raw or b"{}")
    except RecursionError:
        raise BadInput("request body: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError):
        raise BadInput("request body: not JSON") from None
    if not isinstance(body, dict):
        raise BadInput("request body: expected a JSON object")
    return body


@web.middleware
async def _json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """aiohttp's own refusals (an unknown path: 404, a wrong method: 405, a body past the
    bound: 413) as this server's JSON errors, so a client reads the status and the reason."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return web.json_response({"error": f"{request.method} {request.path:.80}: {exc.reason}"}, status=exc.status)


def _error(exc: ExternalError) -> web.Response:
    body = {"error": str(exc)} if exc.kind is None else {"error": str(exc), "kind": exc.kind}
    return web.json_response(body, status=exc.status)


class ServerThread:
    """Runs an :class:`ActionServer` on ``host:port`` in a daemon thread; :meth:`start` returns
    once it listens (the port actually bound: ``port=0`` picks a free one) or raises ``OSError``."""

    def __init__(self, server: ActionServer, host: str, port: int, expire_every_s: float) -> None:
        self.server, self.host, self.port, self.expire_every_s = server, host, port, expire_every_s
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._runner: web.AppRunner | None = None

    def start(self) -> int:
        threading.Thread(target=self._run, name="external-server", daemon=True).start()
        self._started.wait()
        if self._error is not None:
            raise self._error
        return self.port

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._listen())
        except OSError as exc:
            self._error = exc
            self._started.set()
            return
        tasks = [loop.create_task(self.server.infer_forever()),
                 loop.create_task(self.server.expire_forever(self.expire_every_s))]  # fmt: skip
        self._started.set()
        loop.run_forever()
        for task in tasks:
            task.cancel()
        if self._runner is not None:
            loop.run_until_complete(self._runner.cleanup())
        loop.close()

    async def _listen(self) -> None:
        runner = web.AppRunner(self.server.app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        await site.start()
        self._runner = runner
        if runner.addresses:  # the port bound (port 0 picks one)
            self.port = int(runner.addresses[0][1])

    def stop(self) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop.stop)
