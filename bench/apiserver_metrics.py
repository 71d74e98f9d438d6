"""The API server's own count of the requests it served (``apiserver_request_total`` on
its ``/metrics``): the outside fact for "the operator does not flood the API server".

:func:`parse_requests` is pure (Prometheus text -> counts by verb and resource);
:func:`parse_refusals` keeps the answers of 400 and up by code (409: a duplicate create);
:func:`parse_latency` reads ``apiserver_request_duration_seconds`` (the server's own time
per request, from the request's arrival to its answer). :func:`scrape` reads all three
with the bench's admin client; :func:`diff` and :func:`summary` turn two scrapes into what
a phase of the bench sent. Watches are counted when they open (verb WATCH), not per event.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

_LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_DURATION = re.compile(r"^apiserver_request_duration_seconds_(?P<kind>sum|count)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Requests = Counter[tuple[str, str]]  # (verb, resource[/subresource]) -> requests
Refusals = Counter[tuple[str, str, str]]  # (verb, resource[/subresource], HTTP code >= 400) -> requests


def _resource(labels: dict[str, str]) -> str:
    resource = labels.get("resource", "")
    if resource and labels.get("subresource"):
        resource += "/" + labels["subresource"]
    return resource


def _samples(pattern: re.Pattern[str], text: str) -> list[tuple[re.Match[str], dict[str, str]]]:
    found = []
    for line in text.splitlines():
        match = pattern.match(line)
        if match is not None:
            found.append((match, dict(_LABEL.findall(match["labels"]))))
    return found


def parse_requests(text: str) -> Requests:
    """Requests by (verb, resource[/subresource]), summed over codes, groups and scopes;
    /healthz, /metrics and discovery (no resource) are no API objects and left out."""
    counts: Requests = Counter()
    for match, labels in _samples(_LINE, text):
        if resource := _resource(labels):
            counts[(labels.get("verb", ""), resource)] += int(float(match["value"]))
    return counts


def parse_refusals(text: str) -> Refusals:
    """The requests answered with a code of 400 or more, by (verb, resource, code)."""
    counts: Refusals = Counter()
    for match, labels in _samples(_LINE, text):
        code, resource = labels.get("code", ""), _resource(labels)
        if resource and code.isdigit() and int(code) >= 400:
            counts[(labels.get("verb", ""), resource, code)] += int(float(match["value"]))
    return counts


def parse_latency(text: str) -> tuple[Counter[tuple[str, str]], Requests]:
    """(seconds the server spent, requests timed), by (verb, resource): their quotient is
    the server's mean time per request."""
    seconds: Counter[tuple[str, str]] = Counter()
    counts: Requests = Counter()
    for match, labels in _samples(_DURATION, text):
        if resource := _resource(labels):
            key = (labels.get("verb", ""), resource)
            if match["kind"] == "sum":
                seconds[key] += float(match["value"])
            else:
                counts[key] += int(float(match["value"]))
    return seconds, counts


@dataclass
class Scrape:
    """What one read of ``/metrics`` says (or the difference of two)."""

    requests: Requests = field(default_factory=Counter)
    refusals: Refusals = field(default_factory=Counter)
    seconds: Counter[tuple[str, str]] = field(default_factory=Counter)
    timed: Requests = field(default_factory=Counter)

    @classmethod
    def parse(cls, text: str) -> Scrape:
        return cls(parse_requests(text), parse_refusals(text), *parse_latency(text))

    def mean_ms(self, verb: str, resource: str) -> float:
        """The server's mean time for one such request, in milliseconds (nan: none timed)."""
        n = self.timed.get((verb, resource), 0)
        return 1000 * self.seconds[(verb, resource)] / n if n else float("nan")


def scrape(api: Any) -> Scrape:
    """The API server's counts now (``api``: a kubernetes ApiClient with admin rights)."""
    method, url, headers, body, post = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    response = api.call_api(method, url, headers, body, post)
    response.read()
    return Scrape.parse(response.data.decode())


def diff(after: Scrape, before: Scrape) -> Scrape:
    def minus(a: Counter[Any], b: Counter[Any]) -> Counter[Any]:
        return Counter({key: a[key] - b.get(key, 0) for key in a if a[key] > b.get(key, 0)})

    return Scrape(
        minus(after.requests, before.requests),
        minus(after.refusals, before.refusals),
        minus(after.seconds, before.seconds),
        minus(after.timed, before.timed),
    )


def summary(requests: Requests, top: int = 4) -> str:
    """ "N requests (VERB resource n, ...)", the most frequent first."""
    total = sum(requests.values())
    parts = [f"{verb} {resource} {n}" for (verb, resource), n in requests.most_common(top)]
    return f"{total} ({', '.join(parts)})" if parts else "0"


def refusal_summary(refusals: Refusals) -> str:
    """ "VERB resource code n, ..." (the most frequent first), or "none"."""
    parts = [f"{verb} {resource} {code} {n}" for (verb, resource, code), n in refusals.most_common()]
    return ", ".join(parts) or "none"
