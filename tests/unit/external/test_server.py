"""The action server's edges, over loopback as a simulator (or anything else on the network)
reaches it: every refusal is a JSON error with its real HTTP status, never a 500 or a
traceback, and the server goes on serving. Ends with a fuzzer of its HTTP surface."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rolloutfleet.client import PolicyClient, PolicyClientError
from rolloutfleet.external.runner import ExternalRunner
from rolloutfleet.external.server import CLIENT_HEADER, MAX_BODY_BYTES
from rolloutfleet.fleet.runner_factory import make_env_runner
from rolloutfleet.spec.sections.external import PORT_VARIABLE
from tests.unit.external.test_runner import external_job


@pytest.fixture(scope="module")
def runner() -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PORT_VARIABLE, "0")
        with make_env_runner(external_job()) as made:
            assert isinstance(made, ExternalRunner)
            yield made


def call(
    port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    """(status, the JSON reply) of one raw request."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body, headers={CLIENT_HEADER: "raw", **(headers or {})})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def serving(runner: ExternalRunner) -> bool:
    client = PolicyClient(f"127.0.0.1:{runner.port}")
    return client.get_action(client.start_episode(), [0.0] * 4) in (0, 1)


def test_a_deeply_nested_body_is_a_400_not_a_traceback(
    runner: ExternalRunner, caplog: pytest.LogCaptureFixture
) -> None:
    episode = PolicyClient(f"127.0.0.1:{runner.port}", client_id="raw").start_episode()
    status, reply = call(runner.port, "POST", f"/v1/episodes/{episode}/action", b"[" * 100_000 + b"]" * 100_000)
    assert status == 400 and "nested too deeply" in reply["error"], reply
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text
    assert serving(runner)


def test_a_new_episode_with_a_body_that_is_not_a_json_object_is_refused(runner: ExternalRunner) -> None:
    before = runner.get_metrics()["external/open_episodes"]
    for body in (b"{not json", b"[1, 2]", b"\xff\xfe"):
        status, reply = call(runner.port, "POST", "/v1/episodes", body)
        assert status == 400 and reply["error"].startswith("request body:"), (body, reply)
    assert runner.get_metrics()["external/open_episodes"] == before  # none was started
    assert call(runner.port, "POST", "/v1/episodes", b"")[0] == 200  # no body: a plain start


def test_an_absurd_content_length_is_a_413_before_anything_is_read(runner: ExternalRunner) -> None:
    status, reply = call(runner.port, "POST", "/v1/episodes", b"{}", {"Content-Length": str(10**12)})
    assert status == 413 and f"{MAX_BODY_BYTES:,}" in reply["error"], reply
    client = PolicyClient(f"127.0.0.1:{runner.port}")
    episode = client.start_episode()
    with pytest.raises(PolicyClientError) as refused:  # through the client: the status and the reason
        client.get_action(episode, [[0.0] * 4] * (MAX_BODY_BYTES // 8))
    assert refused.value.status == 413 and "above the server's" in str(refused.value)
    assert serving(runner)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_observation_is_refused_as_a_non_finite_reward_is(runner: ExternalRunner, bad: float) -> None:
    client = PolicyClient(f"127.0.0.1:{runner.port}")
    episode = client.start_episode()
    with pytest.raises(PolicyClientError, match=r"obs: expected finite numbers, got .* at \[2\]") as refused:
        client.get_action(episode, [0.0, 0.0, bad, 0.0])
    assert refused.value.status == 400


def test_what_the_server_itself_refuses_reaches_a_client_as_json_with_its_status(runner: ExternalRunner) -> None:
    assert call(runner.port, "GET", "/no/such/path") == (404, {"error": "GET /no/such/path: Not Found"})
    status, reply = call(runner.port, "PUT", "/v1/episodes")
    assert status == 405 and "Method Not Allowed" in reply["error"]


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]),
    path=st.one_of(
        st.sampled_from(
            [
                "/v1/episodes",
                "/v1/episodes/1/action",
                "/v1/episodes/1/returns",
                "/v1/episodes/x/end",
                "/v1/episodes/99999999999999999999/rows",
                "/v1/policy",
                "/v1/info",
                "/v1/clients/raw",
                "/",
            ]
        ),
        st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=40).map(lambda p: "/" + p),
    ),
    body=st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.floats() | st.text(max_size=8),
            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
            max_leaves=12,
        ).map(lambda v: json.dumps(v).encode()),
    ),
    client=st.one_of(st.none(), st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=200)),
)
def test_fuzz_the_http_surface_a_4xx_never_a_500_and_the_server_goes_on(
    runner: ExternalRunner, method: str, path: str, body: bytes, client: str | None
) -> None:
    headers = {} if client is None else {CLIENT_HEADER: client}  # what http.client can send: printable ASCII
    connection = http.client.HTTPConnection("127.0.0.1", runner.port, timeout=30)
    try:
        connection.request(method, path, body=body if method not in ("GET", "HEAD") else None, headers=headers)
        response = connection.getresponse()
        payload = response.read()
    finally:
        connection.close()
    assert response.status < 500, (response.status, payload[:300])
    if response.status >= 400 and method != "HEAD":
        assert "error" in json.loads(payload), payload[:300]
