"""The worker's Prometheus series (:class:`WorkerMetrics`): one registry per process, labelled by
job, namespace and worker index, served on ``/metrics`` by :mod:`rolloutfleet.fleet.probes`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

if TYPE_CHECKING:
    from rolloutfleet.fleet.nonfinite import NonFinite
    from rolloutfleet.fleet.worker_transport import WorkerTransport
    from rolloutfleet.inference.policy import Policy
    from rolloutfleet.sampling.vector.choice import VectorChoice


EXTERNAL_SERIES = {
    "clients": "Simulators connected to this worker's action server (spec.env.external)",
    "open_episodes": "Episodes open on this worker's action server",
    "actions": "Actions the action server computed for simulators (remote inference: one per get_action)",
    "inference_passes": "Batched forward passes of the action server (one for all the observations waiting)",
    "episodes_timed_out": "Episodes closed as truncated after spec.env.external.episodeTimeoutSeconds of silence",
    "episodes_dropped": "Episodes dropped on bad input from their simulator (wrong obs shape or dtype, a bad reward)",
    "calls_refused": "Simulator calls refused: an unknown or ended episode, bad input",
    "clients_refused": "Simulators or episodes refused: beyond spec.env.external.maxClients, or too many episodes open",
    "backpressure_waits": "Simulator calls that waited for room while the worker's publish was blocked",
}
"""``rolloutfleet_external_<name>``: an external env's action server, from its runner's ``external/<name>``."""
EXTERNAL_GAUGES = frozenset({"clients", "open_episodes"})
STEP_PHASES = ("inference", "env_wait", "recording")
"""The runner's ``timers/<phase>_ms`` (:mod:`rolloutfleet.sampling.step_timing`); the worker adds ``publish``."""


class WorkerMetrics:
    """The worker's Prometheus series (one registry per process, labelled by job and index)."""

    def __init__(self, job: str, namespace: str, index: int) -> None:
        self.registry = CollectorRegistry()
        self._labels = {"job_name": job, "namespace": namespace, "worker_index": str(index)}
        self._counted: dict[str, float] = {}  # the transport's totals carried so far (count_transport)
        # Registered in this order (the order of /metrics).
        self._sampling_series()
        self._progress_series()
        self._labelled_series()

    def _counter(self, name: str, doc: str) -> Any:
        return Counter(name, doc, list(self._labels), registry=self.registry).labels(**self._labels)

    def _gauge(self, name: str, doc: str) -> Any:
        return Gauge(name, doc, list(self._labels), registry=self.registry).labels(**self._labels)

    def _sampling_series(self) -> None:
        """Steps, episodes, env restarts and NaN/inf rows; Redis errors and env call timeouts."""
        counter = self._counter
        self.env_steps = counter("rolloutfleet_env_steps", "Env steps sampled (transitions published)")
        self.episodes = counter("rolloutfleet_episodes", "Episodes ended")
        self.episodes_truncated_by_max_steps = counter(
            "rolloutfleet_episodes_truncated_by_max_steps",
            "Multi-agent episodes cut at spec.multiAgent.maxEpisodeSteps",
        )
        self.batches = counter("rolloutfleet_batches_published", "Batches published to Redis")
        self.rows_dropped = counter(
            "rolloutfleet_rows_dropped",
            "Rows sampled and never published: the fragment in hand at a stop that could not",
        )
        self.env_restarts = counter("rolloutfleet_env_restarts", "Sub-environments recreated after raising")
        self.nonfinite_obs = counter(
            "rolloutfleet_nonfinite_observation_rows", "Published rows whose obs or new_obs hold a NaN or an infinity"
        )
        self.nonfinite_rewards = counter("rolloutfleet_nonfinite_reward_rows", "Published rows with a NaN/inf reward")
        self.filter_quarantined = counter(
            "rolloutfleet_filter_quarantined_observations", "NaN/inf observations kept out of the filter statistics"
        )
        self.redis_errors = counter("rolloutfleet_redis_errors", "Failed Redis operations (retried)")
        self.env_call_timeouts = counter(
            "rolloutfleet_env_call_timeouts",
            "Env constructor, reset or step calls still running after spec.env.callTimeoutSeconds (the worker exits 3)",
        )

    def _progress_series(self) -> None:
        """Speed, returns and weights; backpressure, a full Redis, re-sends, weights resets and refusals."""
        counter, gauge = self._counter, self._gauge
        self.steps_per_s = gauge("rolloutfleet_env_steps_per_second", "Sampling speed of the last fragment")
        self.episode_return = gauge("rolloutfleet_episode_return_mean", "Mean return of the last 100 episodes")
        self.weights_seq_no = gauge("rolloutfleet_weights_seq_no", "Version of the weights being sampled with")
        self.backpressure_seconds = counter("rolloutfleet_backpressure_wait_seconds", "Time blocked on a full stream")
        self.waiting_for_learner = gauge(
            "rolloutfleet_waiting_for_learner",
            "1 while the stream is full and no consumer group reads it (waiting for a learner; still ready)",
        )
        self.redis_full_seconds = counter(
            "rolloutfleet_redis_full_wait_seconds", "Time waiting for room in a Redis out of memory (maxmemory)"
        )
        self.batches_resent = counter(
            "rolloutfleet_batches_resent", "Batches re-sent with their identity after a failed publish"
        )
        self.weights_resets = counter(
            "rolloutfleet_weights_resets", "Published weights version found gone or older than the one held"
        )
        self.weights_refused = counter(
            "rolloutfleet_weights_refused",
            "Weights versions refused (did not fit the model, held NaN/inf or could not be decoded); weights kept",
        )

    def _labelled_series(self) -> None:
        """The publish latency histogram; series with labels of their own (device, vectorization, custom)."""
        names = list(self._labels)
        self.publish_latency = Histogram(
            "rolloutfleet_publish_seconds",
            "Time to publish one batch",
            names,
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
        ).labels(**self._labels)
        self._policy_device = Gauge(
            "rolloutfleet_policy_device",
            "1 per policy: the device asked for (requested), the one it acts on, and numpy or torch inference",
            [*names, "policy", "requested", "device", "inference"],
            registry=self.registry,
        )

        self._vectorization = Gauge(
            "rolloutfleet_env_vectorization",
            "1: how the sub-envs step (auto's choice, with its measured step time) and in how many env processes",
            [*names, "requested", "chosen", "processes"],
            registry=self.registry,
        )
        self._custom = Gauge(
            "rolloutfleet_custom_metric",
            "Custom per-episode values set by callbacks (runner.custom_metrics), over the last 100 episodes that set them",
            [*names, "metric", "stat"],
            registry=self.registry,
        )
        self._step_phase = Gauge(
            "rolloutfleet_vector_step_seconds",
            "Mean time per vector step over the last fragment, by phase: inference, env_wait, recording "
            "(the rest of sampling), publish (the batch's, backpressure waits included, over its steps)",
            [*names, "phase"],
            registry=self.registry,
        )
        self.env_step_seconds = self._gauge(
            "rolloutfleet_env_step_seconds", "One sub-env step as auto timed it at start-up (0: not timed)"
        )

        # An external env's action server (spec.env.external): registered in every worker (so
        # the reference lists them), given samples only by a worker that serves one.
        self._external: dict[str, Any] = {
            name: (Gauge if name in EXTERNAL_GAUGES else Counter)(
                f"rolloutfleet_external_{name}", doc, names, registry=self.registry
            )
            for name, doc in EXTERNAL_SERIES.items()
        }
        self._external_seen: dict[str, float] = {}

    def record_external(self, stats: Mapping[str, float | int]) -> None:
        """The runner's ``external/<name>`` numbers (lifetime counts, and the clients and
        episodes open now) as ``rolloutfleet_external_<name>``; nothing for other runners."""
        for name, metric in self._external.items():
            value = stats.get(f"external/{name}")
            if value is None:
                continue
            child = metric.labels(**self._labels)
            if name in EXTERNAL_GAUGES:
                child.set(value)
            elif value > self._external_seen.get(name, 0):
                child.inc(value - self._external_seen.get(name, 0))
                self._external_seen[name] = value
            else:
                child.inc(0)  # the series exists from the first report on, at 0

    def record_custom(self, stats: Mapping[str, float | int]) -> None:
        """``custom/<key>_mean`` (``_min``, ``_max``) of the runner's metrics as
        ``rolloutfleet_custom_metric{metric="<key>", stat="mean"}``."""
        for name, value in stats.items():
            if name.startswith("custom/"):
                key, _, stat = name.removeprefix("custom/").rpartition("_")
                self._custom.labels(**self._labels, metric=key, stat=stat).set(value)

    def record_fragment(self, stats: Mapping[str, float | int], restarts_seen: int, news: NonFinite) -> None:
        """A sampled fragment: the runner's metrics (``restarts_seen``: its env restarts counted
        so far) and its NaN/inf rows (``news``)."""
        if news:
            self.nonfinite_obs.inc(news.obs_rows)
            self.nonfinite_rewards.inc(news.reward_rows)
            self.filter_quarantined.inc(news.quarantined)
        self.env_steps.inc(stats["num_env_steps_sampled"])
        self.episodes.inc(stats["num_episodes"])
        self.episodes_truncated_by_max_steps.inc(stats.get("num_episodes_truncated_by_max_steps", 0))
        self.steps_per_s.set(stats["env_steps_per_s"])
        if stats["episode_return_mean"] == stats["episode_return_mean"]:  # not NaN
            self.episode_return.set(stats["episode_return_mean"])
        self.record_custom(stats)
        self.record_external(stats)
        self.record_step_timing(stats)
        self.env_restarts.inc(int(stats["num_env_restarts"]) - restarts_seen)

    def count_transport(self, transport: WorkerTransport) -> None:
        """Carry the transport's own counters (publishers', weights subscribers') into the metrics."""
        publishers = [p.stats for p in transport.publishers.values()]
        totals = {
            "backpressure_seconds": sum(p.blocked_seconds for p in publishers),
            "redis_full_seconds": sum(p.oom_wait_seconds for p in publishers),
            "batches_resent": sum(p.resent for p in publishers),
            "weights_resets": sum(s.resets for s in transport.subscribers.values()),
            "weights_refused": sum(s.refusals for s in transport.subscribers.values()),
        }
        for name, total in totals.items():
            if total > self._counted.get(name, 0):
                getattr(self, name).inc(total - self._counted.get(name, 0))
                self._counted[name] = total

    def record_step_timing(self, stats: Mapping[str, float | int], publish_seconds: float | None = None) -> None:
        """The runner's ``timers/<phase>_ms`` (none: a runner that does not time its steps) and,
        given, the fragment's publish time per vector step."""
        steps = stats.get("timers/vector_steps")
        if not steps:
            return
        if publish_seconds is not None:
            self._step_phase.labels(**self._labels, phase="publish").set(publish_seconds / steps)
            return
        for phase in STEP_PHASES:
            self._step_phase.labels(**self._labels, phase=phase).set(stats[f"timers/{phase}_ms"] / 1e3)

    def record_vectorization(self, requested: str, choice: VectorChoice) -> None:
        where = {"requested": requested, "chosen": choice.mode, "processes": str(choice.processes)}
        self._vectorization.labels(**self._labels, **where).set(1)
        self.env_step_seconds.set(choice.step_seconds or 0.0)

    def record_policies(self, policies: Mapping[str, Policy]) -> None:
        """Where each policy acts; ``requested="auto", device="cpu"`` is a fallback to the CPU."""
        for policy_id, policy in policies.items():
            where = {"requested": policy.spec.device, "device": policy.device, "inference": policy.inference}
            self._policy_device.labels(**self._labels, policy=policy_id, **where).set(1)
