"""Which policies' weights may have a new version, from the learner's announcements, so a
worker reads a version key when a version was announced and not once a fragment.

A :class:`~rolloutfleet.transport.weights.WeightPublisher` makes a version current and
announces it on the policy's channel (:attr:`~rolloutfleet.transport.redis.keys.JobKeys.weights_news`)
in the same Lua script. A worker holds one subscription for all its policies (one connection,
read without blocking between fragments: no command is sent to Redis for it) and asks
:meth:`WeightsNews.due` which policies to poll::

    >>> news = WeightsNews(client, {"default": keys.weights_news})   # doctest: +SKIP
    >>> news.due()      # everything the first time, then only the policies announced since
    {'default'}

Pub/sub delivers at most once, so nothing here relies on every message arriving:

- until the subscription is confirmed, and whenever it is lost (Redis restarted, the
  connection killed), every policy is due on every call, as without announcements; a
  confirmed (re)subscription makes every policy due once, for what passed meanwhile;
- every ``recheck_s`` (30 s) every policy is due anyway: a learner whose Redis user may not
  publish announcements (an ACL of its own) is still followed, half a minute late at most;
- a Redis user that may not subscribe (``NOPERM``: an ACL without the job's channels) is
  said in one warning, and every policy is then due on every call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from rolloutfleet.transport.redis.errors import BackendError, ClusterError, PermissionRefused

log = logging.getLogger(__name__)

RECHECK_S = 30.0
"""Every policy is read this often even without news."""
RESUBSCRIBE_S = 2.0
"""A lost subscription is tried again after this; meanwhile every policy is read each call."""


class WeightsNews:
    """The announcements of the policies in ``channels`` (policy -> channel), on ``client``'s
    Redis (a connection of its own, from ``client``'s pool)."""

    def __init__(
        self,
        client: Any,
        channels: Mapping[str, str],
        *,
        recheck_s: float = RECHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.channels = dict(channels)
        self._policy_of = {channel.encode(): policy for policy, channel in self.channels.items()}
        self.recheck_s = recheck_s
        self._clock = clock
        self._pubsub: Any = None
        self._confirmed: set[bytes] = set()
        self._pending: set[str] = set(self.channels)
        self._checked_at = clock()
        self._retry_at = 0.0
        self.refused: str | None = None
        """Why this Redis user may not subscribe (then every policy is due on every call)."""
        self.announcements = 0
        """Announcements received."""
        self.lost = 0
        """Times the subscription was lost (and taken up again)."""

    @property
    def listening(self) -> bool:
        """Whether every channel's subscription is confirmed: only then is a call without news
        free of reads."""
        return self._pubsub is not None and len(self._confirmed) == len(self.channels)

    def due(self) -> set[str]:
        """The policies whose version key to read now (each announced one once); never raises:
        a failure to listen only makes every policy due."""
        now = self._clock()
        if self.refused is None:
            self._listen(now)
        if not self.listening:
            self._checked_at = now
            return set(self.channels)
        if now - self._checked_at >= self.recheck_s:
            self._pending |= set(self.channels)
        due, self._pending = self._pending, set()
        if due == set(self.channels):
            self._checked_at = now
        return due

    def _listen(self, now: float) -> None:
        """Subscribe when not subscribed (at most every ``RESUBSCRIBE_S``), then take every
        message already received, without waiting."""
        try:
            if self._pubsub is None:
                if now < self._retry_at:
                    return
                self._pubsub = self.client.pubsub()
                self._pubsub.subscribe(*self.channels.values())
            while (message := self._pubsub.get_message(timeout=0.0)) is not None:
                self._take(message)
        except PermissionRefused as exc:
            self.refused = str(exc)
            log.warning(
                "this Redis user may not subscribe to %s (%s): weights versions are read every fragment instead; "
                "grant the channel (&%s*) to avoid that",
                ", ".join(self.channels.values()), exc, next(iter(self.channels.values())).rsplit(":", 1)[0] + ":",
            )  # fmt: skip
            self._drop()
        except (BackendError, ClusterError) as exc:  # away, restarted, the connection killed
            log.debug("weights announcements lost (%s): reading the version every fragment meanwhile", exc)
            self.lost += 1
            self._retry_at = now + RESUBSCRIBE_S
            self._drop()

    def _take(self, message: Mapping[str, Any]) -> None:
        raw = message.get("channel")
        channel = raw if isinstance(raw, bytes) else str(raw).encode()
        policy = self._policy_of.get(channel)
        if policy is None:
            return
        if message.get("type") == "subscribe":  # (re)subscribed: whatever passed meanwhile is due
            self._pending |= set(self.channels)
            self._confirmed.add(channel)
        elif message.get("type") == "message":
            self.announcements += 1
            self._pending.add(policy)

    def _drop(self) -> None:
        """Forget the subscription (its connection closed): every policy is due until a new one
        is confirmed."""
        if self._pubsub is not None:
            try:
                self._pubsub.close()
            except Exception:  # closing a broken connection: nothing to do about it
                log.debug("closing the weights announcements' connection failed", exc_info=True)
        self._pubsub = None
        self._confirmed = set()

    def close(self) -> None:
        self._drop()
