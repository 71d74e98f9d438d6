"""The API server's own count of the requests it served (``apiserver_request_total`` on
its ``/metrics``): the outside fact for "the operator does not flood the API server".

:func:`parse_requests` is pure (Prometheus text -> counts by verb and resource);
:func:`scrape` reads it with the bench's admin client; :func:`diff` and :func:`summary`
turn two scrapes into what a phase of the bench sent. Watches are counted when they
open (verb WATCH), not per event.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

_LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Requests = Counter[tuple[str, str]]  # (verb, resource[/subresource]) -> requests


def parse_requests(text: str) -> Requests:
    """Requests by (verb, resource[/subresource]), summed over codes, groups and scopes."""
    counts: Requests = Counter()
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        resource = labels.get("resource", "")
        if not resource:
            continue  # /healthz, /metrics, discovery: not API objects
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        counts[(labels.get("verb", ""), resource)] += int(float(match["value"]))
    return counts


def scrape(api: Any) -> Requests:
    """The API server's counts now (``api``: a kubernetes ApiClient with admin rights)."""
    method, url, headers, body, post = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    response = api.call_api(method, url, headers, body, post)
    response.read()
    return parse_requests(response.data.decode())


def diff(after: Requests, before: Requests) -> Requests:
    return Counter({key: after[key] - before.get(key, 0) for key in after if after[key] > before.get(key, 0)})


def summary(requests: Requests, top: int = 4) -> str:
    """ "N requests (VERB resource n, ...)", the most frequent first."""
    total = sum(requests.values())
    parts = [f"{verb} {resource} {n}" for (verb, resource), n in requests.most_common(top)]
    return f"{total} ({', '.join(parts)})" if parts else "0"
