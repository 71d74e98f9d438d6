"""Redis URLs: any password read back exactly (raw or percent-encoded), errors and shown forms
without it, and the CRD's rule refusing the same URLs as the spec model."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet.spec.redis_url import BadRedisURL, parse_redis_url, redacted_url

REPO = Path(__file__).resolve().parents[3]
NASTY = ["a/b", "p#w", "q?x", "p@ss", "p:w", "sp ace", "a@b:c/d?e#f g", ":lead", "trail@", "@", "//", "#", "?", "ü€"]


@pytest.mark.parametrize("password", NASTY)
@pytest.mark.parametrize("scheme", ["redis", "rediss"])
def test_a_raw_or_encoded_password_is_read_back_exactly(password: str, scheme: str) -> None:
    for written in (password, urllib.parse.quote(password, safe="")):
        url = parse_redis_url(f"{scheme}://app:{written}@redis.ns.svc:6380/3")
        assert (url.username, url.password, url.host, url.port, url.db) == ("app", password, "redis.ns.svc", 6380, 3)
        assert url.shown == f"{scheme}://redis.ns.svc:6380/3" == url.client_url
        assert password not in repr(url)


def test_a_unix_socket_url_takes_credentials_before_the_path() -> None:
    url = parse_redis_url("unix://:p@/w@/run/redis.sock?db=2")
    assert (url.password, url.path, url.db, url.address) == ("p@/w", "/run/redis.sock", 2, "unix:/run/redis.sock")
    assert parse_redis_url("unix:///run/redis@6379.sock").path == "/run/redis@6379.sock"


def test_percent_always_starts_an_escape() -> None:
    assert parse_redis_url("redis://:100%25@h").password == "100%"
    assert parse_redis_url("redis://:%41b@h").password == "Ab"  # an escape, as RFC 3986 says
    with pytest.raises(BadRedisURL, match="write a '%' as %25") as caught:
        parse_redis_url("redis://:50%off@h")
    assert "50" not in str(caught.value) and "off" not in str(caught.value)


def test_credentials_in_the_options_are_taken_out_of_what_is_shown() -> None:
    url = parse_redis_url("redis://h:1/0?password=a%40b&socket_keepalive=true")
    assert (url.password, url.shown) == ("a@b", "redis://h:1/0?socket_keepalive=true")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://u:hunter2@h:6379/0", "'http://h:6379/0' is not a Redis URL: it must start with redis://"),
        ("redis://:hunter2@h:99999/0", "'redis://h:99999/0' is not a Redis URL: its port is not a number"),
        ("redis://:hunter2@h:6379/abc", "its path '/abc' is not a database number"),
        ("redis://:hunter2:6379/0", "'redis://' is not a Redis URL: its port is not a number from 1 to 65535 (a pass"),
        ("redis://:hunter2@my host/0", "'redis://my' is not a Redis URL: expected redis://[USER[:PASSWORD]@]HOST"),
        ("unix://:hunter2@/", "names no socket path"),
    ],
)
def test_a_bad_url_is_one_line_without_the_password(url: str, why: str) -> None:
    with pytest.raises(BadRedisURL) as caught:
        parse_redis_url(url)
    assert why in str(caught.value) and "\n" not in str(caught.value)
    assert "hunter2" not in str(caught.value) and "hunter2" not in redacted_url(url)


@given(st.text(min_size=1, max_size=40).filter(lambda pw: "%" not in pw and pw.strip() == pw and pw.isprintable()))
def test_any_password_without_percent_is_read_back_raw(password: str) -> None:
    assert parse_redis_url(f"redis://:{password}@h:1/0").password == password


@given(st.text(min_size=1, max_size=40))
def test_any_password_is_read_back_encoded(password: str) -> None:
    assert parse_redis_url(f"rediss://u:{urllib.parse.quote(password, safe='')}@h/0").password == password


def _crd_rules() -> list[str]:
    doc = next(d for d in yaml.safe_load_all((REPO / "crds" / "rolloutjobs.rolloutfleet.io.yaml").read_text()) if d)
    url = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["redis"]
    (rule,) = url["properties"]["url"]["x-kubernetes-validations"]
    return re.findall(r"self\.matches\('(.*?)'\)", rule["rule"])


def _model_refuses(url: str) -> bool:
    try:
        RolloutJob.from_dict({"metadata": {"name": "x"}, "spec": {"env": {"id": "CartPole-v1"}, "redis": {"url": url}}})
    except SpecError as exc:
        return "must not contain a password" in str(exc)
    return False


@pytest.mark.parametrize(
    ("url", "has_password"),
    [(f"redis://:{pw}@h:6379/0", True) for pw in NASTY]
    + [(f"rediss://user:{pw}@h", True) for pw in NASTY]
    + [(f"unix://:{pw}@/run/r.sock", True) for pw in ("a/b", "p@ss", "p:w")]
    + [("redis://h/0?password=x", True)]
    + [(url, False) for url in ("redis://h:6379/0", "redis://user@h:6379/0", "redis://:@h", "rediss://[::1]:6380/1")]
    + [(url, False) for url in ("unix:///run/a@b.sock", "redis://h/0?ssl_cert_reqs=none", "unix:///run/r.sock?db=1")],
)
def test_the_crd_refuses_a_password_where_the_model_does(url: str, has_password: bool) -> None:
    crd_refuses = any(re.search(pattern, url) for pattern in _crd_rules())
    assert crd_refuses == _model_refuses(url) == has_password
