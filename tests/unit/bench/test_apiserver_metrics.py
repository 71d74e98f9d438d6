"""bench.apiserver_metrics: the API server's request counts, by verb and resource; its
refusals by code; its own time per request."""

from __future__ import annotations

import math

from bench.apiserver_metrics import Counter, Scrape, diff, parse_refusals, parse_requests, refusal_summary, summary

TEXT = """# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 1000
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 1e+03
apiserver_request_total{code="422",component="apiserver",dry_run="",group="rolloutfleet.io",resource="rolloutjobs",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 2
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/healthz",verb="GET",version=""} 7
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 30.5
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 1005
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="0.05"} 900
"""


def test_requests_are_summed_over_codes_and_split_by_subresource() -> None:
    counts = parse_requests(TEXT)
    assert counts == {("POST", "pods"): 1005, ("PATCH", "pods/status"): 1000, ("PATCH", "rolloutjobs/status"): 2}


def test_refusals_are_kept_by_code() -> None:
    refusals = parse_refusals(TEXT)
    assert refusals == {("POST", "pods", "409"): 5, ("PATCH", "rolloutjobs/status", "422"): 2}
    assert refusal_summary(refusals) == "POST pods 409 5, PATCH rolloutjobs/status 422 2"
    assert refusal_summary(Counter()) == "none"


def test_the_servers_mean_time_per_request() -> None:
    scrape = Scrape.parse(TEXT)
    assert math.isclose(scrape.mean_ms("POST", "pods"), 1000 * 30.5 / 1005)
    assert math.isnan(scrape.mean_ms("DELETE", "pods"))  # none timed: no number made up


def test_a_phase_is_the_difference_of_two_scrapes() -> None:
    before = Scrape(
        requests=Counter({("POST", "pods"): 5, ("GET", "pods"): 2}), refusals=Counter({("POST", "pods", "409"): 1})
    )
    after = Scrape(
        requests=Counter({("POST", "pods"): 1005, ("GET", "pods"): 2, ("DELETE", "pods"): 3}),
        refusals=Counter({("POST", "pods", "409"): 4}),
    )
    phase = diff(after, before)
    assert phase.requests == {("POST", "pods"): 1000, ("DELETE", "pods"): 3}
    assert phase.refusals == {("POST", "pods", "409"): 3}
    assert summary(phase.requests) == "1003 (POST pods 1000, DELETE pods 3)"
