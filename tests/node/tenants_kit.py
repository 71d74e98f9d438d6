"""What the node tier's tenant tests run: Redis commands from inside a worker container
(``kubectl exec``, with the container's own environment: its per-job user and password),
and the places a password must never show up (logs, status, Events, argv, client names)."""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

from tests.node.nodekit import Node

# Run inside job A's worker container: the client logs in as the container's user (the
# ROLLOUTFLEET_REDIS_USERNAME/PASSWORD of its env: nothing on this command line).
TRIES = """
import json, os, sys
import redis
from rolloutfleet.transport.redis.keys import job_keys
a, b = job_keys(sys.argv[1], sys.argv[2]), job_keys(sys.argv[1], sys.argv[3])
ca = os.environ.get("ROLLOUTFLEET_REDIS_CA_FILE")  # rediss://: the CA the operator mounted
r = redis.Redis.from_url(os.environ["ROLLOUTFLEET_REDIS_URL"], username=os.environ["ROLLOUTFLEET_REDIS_USERNAME"],
                         password=os.environ["ROLLOUTFLEET_REDIS_PASSWORD"], **({"ssl_ca_certs": ca} if ca else {}))
tries = {
    "append to B's stream": lambda: r.xadd(b.batches, {"x": "poison"}),
    "read B's stream": lambda: r.xrange(b.batches),
    "publish A's weights": lambda: r.set(a.weights_version, "999 1 1"),
    "FLUSHALL": lambda: r.flushall(),
    "CONFIG GET": lambda: r.config_get("*"),
    "KEYS *": lambda: r.keys("*"),
    "read A's weights": lambda: r.get(a.weights_version),
}
out = {}
for name, call in tries.items():
    try:
        call()
        out[name] = "ok"
    except redis.exceptions.NoPermissionError as error:
        out[name] = "NOPERM " + str(error)
    except redis.RedisError as error:
        out[name] = type(error).__name__ + " " + str(error)
print(json.dumps(out))
"""


def tries_from_worker(node: Node, namespace: str, pod: str, job_a: str, job_b: str) -> dict[str, str]:
    """:data:`TRIES` run in ``pod``'s worker container: each try's outcome."""
    out = node.kubectl("-n", namespace, "exec", pod, "--", "python3", "-c", TRIES, namespace, job_a, job_b)
    return dict(json.loads(out.strip().splitlines()[-1]))


def secret_values(node: Node, namespace: str, name: str) -> dict[str, str]:
    secret = node.get(namespace, "secret", name)
    return {k: base64.b64decode(v).decode() for k, v in (secret or {}).get("data", {}).items()}


def where_passwords_must_not_be(node: Node, namespace: str) -> dict[str, str]:
    """Every log, status, Event and argv of the run, by where it came from."""
    texts: dict[str, str] = {}
    for pod in node.get(namespace, "pods")["items"]:
        name = pod["metadata"]["name"]
        for container in pod["spec"]["containers"]:
            texts[f"log {name}/{container['name']}"] = node.kubectl(
                "-n", namespace, "logs", name, "-c", container["name"], check=False
            )
        texts[f"spec+status {name}"] = json.dumps(pod)
    texts["rolloutjobs"] = json.dumps(node.get(namespace, "rj"))
    texts["events"] = json.dumps(node.get(namespace, "events"))
    texts["events (all namespaces)"] = node.kubectl("get", "events", "-A", "-o", "json")
    # Every process on the node, the containers' included (containerd runs them here).
    texts["argv"] = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    return texts


def secrets_of(node: Node, namespace: str) -> list[str]:
    """Every password held in the namespace's Secrets (the chart's Redis's, each job's users')."""
    found: list[str] = []
    for secret in node.get(namespace, "secrets")["items"]:
        for key, value in (secret.get("data") or {}).items():
            if "password" in key.lower():
                found.append(base64.b64decode(value).decode())
    return [p for p in found if len(p) >= 8]


def client_names(admin: Any) -> str:
    """The names of every client connected to Redis (``CLIENT LIST``), as one text."""
    return " ".join(str(c.get("name", "")) for c in admin.client_list())
