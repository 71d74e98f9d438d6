"""TLS to a real redis-server (``--tls-port``) with a CA and a server certificate made here by
the openssl CLI: a worker's publisher and a learner's consumer verify the server against
``$ROLLOUTFLEET_REDIS_CA_FILE`` (or the URL's ``ssl_ca_certs``); a server signed by another
CA is refused at once, in one line; the TLS port refuses plain TCP."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.spec.sections.network_spec import CA_FILE_ENV
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.connection import RedisUnavailable, check_reachable
from tests.integration.redis_server import redis_server_binary, tool_binary

pytestmark = pytest.mark.integration


def make_ca(openssl: str, folder: Path, name: str) -> tuple[Path, Path]:
    key, cert = folder / f"{name}.key", folder / f"{name}.crt"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return key, cert


def sign_server(openssl: str, folder: Path, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    key, csr, cert = folder / "server.key", folder / "server.csr", folder / "server.crt"
    subprocess.run(
        [openssl, "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=redis", "-keyout", str(key), "-out", str(csr)],
        check=True, capture_output=True,
    )  # fmt: skip
    (folder / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    subprocess.run(
        [openssl, "x509", "-req", "-in", str(csr), "-CA", str(ca[1]), "-CAkey", str(ca[0]), "-CAcreateserial",
         "-days", "2", "-extfile", str(folder / "san.ext"), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return key, cert


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path, Path]]:
    """(TLS port, the CA that signed the server, another CA)."""
    openssl = tool_binary("openssl", "openssl")
    folder = tmp_path_factory.mktemp("tls")
    ca = make_ca(openssl, folder, "rolloutfleet-test-ca")
    _, other = make_ca(openssl, folder, "someone-else")
    key, cert = sign_server(openssl, folder, ca)
    port = free_port()
    server = subprocess.Popen(
        [redis_server_binary(), "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert),
         "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca[1]), "--tls-auth-clients", "no",
         "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        client = redis.Redis(host="localhost", port=port, ssl=True, ssl_ca_certs=str(ca[1]))
        for _ in range(200):  # no time bound: a count of attempts, each a refused connection
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if server.poll() is not None:
                    pytest.fail(
                        f"redis-server --tls-port exited: {server.stdout.read().decode() if server.stdout else ''}"
                    )
                time.sleep(0.05)
        client.close()
        yield port, ca[1], other
    finally:
        server.terminate()
        server.wait(10)


def test_a_worker_publishes_over_tls_and_a_learner_consumes(
    tls_redis: tuple[int, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, ca, _ = tls_redis
    monkeypatch.setenv(CA_FILE_ENV, str(ca))  # as in a worker pod: spec.redis.tls.caSecret mounted there
    url = f"rediss://localhost:{port}/0"
    with BatchPublisher(url, "tls-job") as publisher:
        publisher.publish({"obs": np.arange(12, dtype=np.float32).reshape(3, 4), "actions": np.arange(3)})
    monkeypatch.delenv(CA_FILE_ENV)  # a learner may name the CA in the URL instead
    consumer = BatchConsumer(f"{url}?ssl_ca_certs={ca}", "tls-job", start="0")
    try:
        batch = consumer.get(min_steps=3, timeout=10)
    finally:
        consumer.close()
    assert batch is not None
    np.testing.assert_array_equal(batch["obs"], np.arange(12, dtype=np.float32).reshape(3, 4))


def test_a_server_signed_by_another_ca_is_refused_in_one_line(
    tls_redis: tuple[int, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, _, other = tls_redis
    monkeypatch.setenv(CA_FILE_ENV, str(other))
    with pytest.raises(RedisUnavailable) as refused:
        check_reachable(f"rediss://localhost:{port}/0", timeout_s=None)  # no deadline: refused at once, not retried
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"redis at localhost:{port}: TLS: its certificate is not trusted"), message


def test_the_tls_port_refuses_plain_tcp(tls_redis: tuple[int, Path, Path]) -> None:
    port, _, _ = tls_redis
    with pytest.raises(RedisUnavailable):
        check_reachable(f"redis://localhost:{port}/0", timeout_s=1)


def test_a_learner_is_told_at_once_not_after_its_reconnect_deadline(
    tls_redis: tuple[int, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, _, other = tls_redis
    monkeypatch.setenv(CA_FILE_ENV, str(other))
    with pytest.raises(RedisUnavailable) as refused:  # an hour of retries would outlast the test's timeout
        BatchConsumer(f"rediss://localhost:{port}/0", "tls-job", reconnect_timeout_s=3600)
    message = str(refused.value)
    assert (
        "\n" not in message and f"Redis at localhost:{port}/0 refused: TLS: its certificate is not trusted" in message
    )


def test_a_plain_url_to_a_tls_redis_is_told_to_use_rediss(tls_redis: tuple[int, Path, Path]) -> None:
    """What the operator writes in RedisReachable for a job whose redis:// URL names a TLS-only Redis."""
    from rolloutfleet.transport.redis.clients import look

    port, _, _ = tls_redis
    told = look(f"redis://localhost:{port}/0").error
    assert told == (
        f"redis at localhost:{port}: the server speaks TLS: use rediss:// in spec.redis.url and "
        "spec.redis.tls.caSecret (the CA that signed its certificate)"
    )
    gone = look("redis://localhost:1/0").error  # nothing there: not taken for TLS
    assert gone is not None and gone.endswith("connection refused")
