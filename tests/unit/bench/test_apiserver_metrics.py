"""bench.apiserver_metrics: the API server's request counts, by verb and resource."""

from __future__ import annotations

from bench.apiserver_metrics import Counter, diff, parse_requests, summary

TEXT = """# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 1000
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 1e+03
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/healthz",verb="GET",version=""} 7
apiserver_request_duration_seconds_count{resource="pods",verb="POST"} 99
"""


def test_requests_are_summed_over_codes_and_split_by_subresource() -> None:
    counts = parse_requests(TEXT)
    assert counts == {("POST", "pods"): 1005, ("PATCH", "pods/status"): 1000}  # /healthz is no API object


def test_a_phase_is_the_difference_of_two_scrapes() -> None:
    before = Counter({("POST", "pods"): 5, ("GET", "pods"): 2})
    after = Counter({("POST", "pods"): 1005, ("GET", "pods"): 2, ("DELETE", "pods"): 3})
    assert diff(after, before) == {("POST", "pods"): 1000, ("DELETE", "pods"): 3}
    assert summary(diff(after, before)) == "1003 (POST pods 1000, DELETE pods 3)"
