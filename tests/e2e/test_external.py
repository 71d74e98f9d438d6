"""An external env on the real API server: the operator gives the job a Service on its port
that selects its workers, and a worker pod serves a client's episodes into the stream."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from kubernetes import client as k8s

from rolloutfleet.client import PolicyClient
from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from tests.cluster.kubelet import LocalKubelet
from tests.e2e.cluster_kit import Cluster, OperatorFactory, wait_for, worker_port_block
from tests.e2e.jobs import Jobs, job_manifest, read_batches


def test_an_external_job_gets_a_service_selecting_its_workers_on_its_port(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    port = worker_port_block(size=1)
    operators.start()
    env = {"id": "CartPole-v1", "numEnvs": 1, "external": {"port": port}}
    jobs.create(job_manifest("sim", redis_server.url, replicas=1, env=env, sampling={"rolloutFragmentLength": 10}))
    core = k8s.CoreV1Api(cluster.api())
    found: list[Any] = []

    def service_exists() -> bool:
        items = core.list_namespaced_service(namespace, field_selector="metadata.name=sim-external").items
        found[:] = items
        return bool(items)

    wait_for(service_exists, 60, jobs.describe)
    service = found[0]
    assert [(p.name, p.port, p.target_port, p.protocol) for p in service.spec.ports] == [
        ("external", port, "external", "TCP")
    ]
    assert service.metadata.owner_references[0].kind == "RolloutJob"
    wait_for(lambda: jobs.running("sim", 1), 60, jobs.describe)
    pod = jobs.pods("sim")["sim-worker-0"]
    assert service.spec.selector.items() <= pod["metadata"]["labels"].items()  # it selects the worker pod
    (container,) = pod["spec"]["containers"]
    assert {"name": "external", "containerPort": port, "protocol": "TCP"} in container["ports"]

    # The pod's worker serves a simulator's episodes (pods share this host's network here).
    simulator = PolicyClient(f"127.0.0.1:{port}")

    def serving() -> bool:
        try:
            simulator.info()
            return True
        except OSError:
            return False

    wait_for(serving, 120, jobs.describe)
    cartpole = gym.make("CartPole-v1")
    for seed in range(3):
        obs, _ = cartpole.reset(seed=seed)
        episode = simulator.start_episode()
        done = False
        while not done:
            obs, reward, terminated, truncated, _ = cartpole.step(simulator.get_action(episode, obs))
            simulator.log_returns(episode, float(reward))
            done = terminated or truncated
        simulator.end_episode(episode, obs, truncated=truncated)
    read_batches(redis_server.url, "sim", namespace, {0})
