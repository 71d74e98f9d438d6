"""PolicyClient: what a simulator running on its own calls for actions (``spec.env.external``).

RLlib's verbs, against one worker's action endpoint (a Service on Kubernetes, an address
``rolloutfleet run`` prints)::

    from rolloutfleet.client import PolicyClient

    client = PolicyClient("127.0.0.1:9900")
    episode = client.start_episode()
    action = client.get_action(episode, obs)         # the server acts (inference="remote")
    client.log_returns(episode, reward)
    client.end_episode(episode, obs, truncated=False)

The standard library only: no torch, gymnasium or numpy is imported (a numpy observation is
sent through its ``tolist()``); ``inference="local"`` acts in the simulator's process with the
worker's weights (numpy, imported then: :mod:`rolloutfleet.client_local`). JSON over one kept-alive HTTP connection; a refused call raises
:class:`PolicyClientError` with the server's one-line reason.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import time
import uuid
from typing import Any

__all__ = ["PolicyClient", "PolicyClientError"]

CLIENT_HEADER = "X-Rolloutfleet-Client"


class PolicyClientError(Exception):
    """The server refused a call: ``status`` (HTTP) and the server's reason as the message.

    400: bad input (the episode was dropped); 404: unknown episode; 409: the episode ended;
    503: the server is full (``maxClients``) or stopping. ``kind``: ``"elsewhere"`` (404) for
    an episode another worker started, or this one before a restart."""

    def __init__(self, status: int, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


class PolicyClient:
    """A simulator's connection to a worker serving an external env.

    ``address``: ``host:port`` (or ``http://host:port``). ``inference``: ``"remote"`` (the
    server computes every action) or ``"local"``: the client pulls the worker's weights and
    acts itself (numpy, imported then), shipping its rows every ``ship_every`` steps and at
    each episode's end, and pulling newer weights when a shipment's answer names a newer
    version (the default MLP with Box observations and Discrete actions; otherwise the
    server refuses with the reason). ``client_id`` names this client to the server (default:
    a random id); reusing it after a reconnect keeps the same slot.

    A reconnect that lands on another worker (a Service picks a worker per connection): an
    episode this client started goes on there as a new episode (:attr:`episodes_moved`
    counts them, :meth:`server_episode_id` names the new id); the old worker closes the old
    one as truncated after its timeout. Remote inference loses the step in flight; local
    inference ships its unshipped rows to the new episode.
    """

    def __init__(
        self,
        address: str,
        inference: str = "remote",
        timeout_s: float = 300.0,
        client_id: str | None = None,
        ship_every: int = 64,
    ) -> None:
        if inference not in ("remote", "local"):
            raise ValueError(f"inference={inference!r}: expected 'remote' (the server acts) or 'local'")
        if ship_every < 1:
            raise ValueError(f"ship_every: expected at least 1 row, got {ship_every}")
        self.inference = inference
        self.ship_every = ship_every
        self._local: Any = None  # rolloutfleet.client_local.LocalPolicy, fetched on first use
        self._open: dict[str, dict[str, Any]] = {}  # local episodes: rows not shipped, the step in progress
        self._keepalive_s = 0.0
        self._contact = 0.0
        host, _, port = address.removeprefix("http://").rstrip("/").rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"address: expected 'host:port', got {address!r}")
        self.address = f"{host}:{port}"
        self.client_id = client_id or uuid.uuid4().hex
        self._host, self._port, self._timeout_s = host, int(port), timeout_s
        self._connection: http.client.HTTPConnection | None = None
        self.last_weights_seq_no = 0
        """The weights version of the last action received."""
        self._started: dict[str, str | None] = {}
        """Open episodes this client started -> the id they go on under (None: moved, not yet
        started on the new worker)."""
        self.episodes_moved = 0
        """Episodes that went on as a new episode on another worker after a reconnect."""

    # -- RLlib's verbs ---------------------------------------------------------------

    def start_episode(self, episode_id: str | None = None, training_enabled: bool = True) -> str:
        """A new episode; its id. The server assigns ids: ``episode_id`` must be None, and every
        episode is trained on (``training_enabled`` must be True)."""
        if episode_id is not None or not training_enabled:
            raise ValueError("the server assigns episode ids and trains on every episode")
        episode_id = str(self._call("POST", "/v1/episodes", {})["episode_id"])
        self._started[episode_id] = episode_id
        return episode_id

    def server_episode_id(self, episode_id: str) -> str | None:
        """The id the episode's rows carry now (``eps_id`` in the stream): ``episode_id`` unless it
        moved to another worker (None: moved, nothing sent there yet)."""
        return self._started.get(episode_id, episode_id)

    def get_action(self, episode_id: str, observation: Any) -> Any:
        """The action for ``observation`` (an int for Discrete actions, a nested list for Box)."""
        if self.inference == "local":
            return self._act_locally(episode_id, observation)
        reply = self._episode_call(episode_id, "action", {"obs": _plain(observation)})
        self.last_weights_seq_no = int(reply.get("weights_seq_no", 0))
        return reply["action"]

    def log_returns(self, episode_id: str, reward: float, info: Any = None) -> None:
        """Reward for the last action (calls add up until the next ``get_action``)."""
        if self.inference == "local":
            step = self._open.get(episode_id, {}).get("step")
            if step is None:
                raise ValueError(f"episode {episode_id}: a reward before the first get_action() rewards no action")
            step["reward"] += float(reward)
            return
        if self._started.get(episode_id, episode_id) is None:
            return  # moved: the action it rewards was taken on the old worker, lost with it
        try:
            self._call("POST", f"/v1/episodes/{self._server_id(episode_id)}/returns", {"reward": _plain(reward)})
        except PolicyClientError as exc:
            if not self._moved(episode_id, exc):
                raise

    def end_episode(self, episode_id: str, observation: Any, truncated: bool = False) -> None:
        """The episode ended at ``observation``: terminated, or ``truncated`` (a time limit)."""
        if self.inference == "local" and self._open.get(episode_id, {}).get("step") is not None:
            self._step_done(episode_id, observation)
            self._ship(episode_id, "truncated" if truncated else "terminated")
            del self._open[episode_id]
            self._started.pop(episode_id, None)
            return
        self._open.pop(episode_id, None)
        if self._started.get(episode_id, episode_id) is None:
            del self._started[episode_id]  # moved, no action asked on the new worker: no row to end there
            return
        try:
            self._call("POST", f"/v1/episodes/{self._server_id(episode_id)}/end",
                       {"obs": _plain(observation), "truncated": truncated})  # fmt: skip
        except PolicyClientError as exc:
            if not self._moved(episode_id, exc):
                raise  # moved: its last step went with the old worker
        self._started.pop(episode_id, None)

    # -- episodes that move to another worker ------------------------------------------

    def _episode_call(self, episode_id: str, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        """``verb`` for the episode; once more as a new episode if its worker is not the one
        reached now."""
        try:
            return self._call("POST", f"/v1/episodes/{self._server_id(episode_id)}/{verb}", body)
        except PolicyClientError as exc:
            if not self._moved(episode_id, exc):
                raise
        return self._call("POST", f"/v1/episodes/{self._server_id(episode_id)}/{verb}", body)

    def _moved(self, episode_id: str, exc: PolicyClientError) -> bool:
        """Whether ``exc`` says another worker holds this client's episode: it then goes on as a new
        episode on the worker reached now (started at the next call)."""
        if exc.kind != "elsewhere" or episode_id not in self._started:
            return False
        self._started[episode_id] = None
        self.episodes_moved += 1
        return True

    def _server_id(self, episode_id: str) -> str:
        """The id to call with; a moved episode is started anew on the worker reached now."""
        server_id = self._started.get(episode_id, episode_id)
        if server_id is None:
            server_id = str(self._call("POST", "/v1/episodes", {})["episode_id"])
            self._started[episode_id] = server_id
        return server_id

    # -- inference="local" ------------------------------------------------------------

    def _act_locally(self, episode_id: str, observation: Any) -> Any:
        if self._local is None:
            self._pull_policy()
            self._keepalive_s = float(self.info()["episode_timeout_seconds"]) / 3
        episode = self._open.setdefault(episode_id, {"rows": [], "step": None})
        if episode["step"] is not None:
            self._step_done(episode_id, observation)
        step = self._local.act(observation)
        episode["step"] = {"obs": _plain(observation), "reward": 0.0, **step}
        self.last_weights_seq_no = self._local.seq_no
        if len(episode["rows"]) >= self.ship_every or (
            episode["rows"] and time.monotonic() - self._contact > self._keepalive_s
        ):
            self._ship(episode_id, None)  # the server hears of a slow episode before it times out
        return step["action"]

    def _step_done(self, episode_id: str, observation: Any) -> None:
        episode = self._open[episode_id]
        episode["rows"].append({**episode["step"], "new_obs": _plain(observation)})
        episode["step"] = None

    def _ship(self, episode_id: str, end: str | None) -> None:
        rows, self._open[episode_id]["rows"] = self._open[episode_id]["rows"], []
        reply = self._episode_call(episode_id, "rows", {"rows": rows, "end": end})
        self._contact = time.monotonic()
        if int(reply.get("weights_seq_no", 0)) > self._local.seq_no:
            self._pull_policy()

    def _pull_policy(self) -> None:
        from rolloutfleet.client_local import LocalPolicy  # numpy, for local inference only

        self._local = LocalPolicy(self._call("GET", "/v1/policy", None))

    def info(self) -> dict[str, Any]:
        """The server's spaces and limits."""
        return self._call("GET", "/v1/info", None)

    def close(self) -> None:
        """Leave the server (frees this client's slot) and close the connection."""
        with contextlib.suppress(OSError, PolicyClientError):  # a server that is gone forgot this client
            self._call("DELETE", f"/v1/clients/{self.client_id}", None)
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the wire --------------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        """One call; a worker that is stopping (it did nothing) is left for a new connection,
        once: through a Service, another worker."""
        try:
            return self._exchange(method, path, body)
        except PolicyClientError as exc:
            if exc.kind != "stopping":
                raise
            self._drop_connection()
        return self._exchange(method, path, body)

    def _drop_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _exchange(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {CLIENT_HEADER: self.client_id, "Content-Type": "application/json"}
        for attempt in (0, 1):
            fresh = self._connection is None
            if self._connection is None:
                self._connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
            try:
                self._connection.request(method, path, body=data, headers=headers)
                response = self._connection.getresponse()
                payload = response.read()
                break
            except (OSError, http.client.HTTPException) as exc:
                self._connection.close()  # the next call starts a fresh connection
                self._connection = None
                stale = isinstance(exc, http.client.RemoteDisconnected | BrokenPipeError | ConnectionResetError)
                if fresh or attempt or not stale:  # a kept-alive connection the server closed: one more try
                    raise
        try:
            reply = json.loads(payload or b"{}")
        except ValueError:
            if response.status >= 400:  # a proxy's or a server's own error page: say what it said
                text = " ".join(payload[:200].decode("utf-8", "replace").split())
                raise PolicyClientError(
                    response.status, f"{self.address}: HTTP {response.status} {response.reason}: {text}"
                ) from None
            raise PolicyClientError(response.status, f"{self.address}: not a RolloutFleet action server") from None
        if not isinstance(reply, dict):
            raise PolicyClientError(response.status, f"{self.address}: not a RolloutFleet action server")
        if response.status >= 400:
            message = f"{self.address}: {reply.get('error', response.reason)}"
            raise PolicyClientError(response.status, message, reply.get("kind"))
        return dict(reply)


def _plain(value: Any) -> Any:
    """A numpy array or number as plain lists and numbers (what JSON holds)."""
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else value
