"""Phase, conditions and progress of a RolloutJob's status."""

from __future__ import annotations

from rolloutfleet_operator.children.pods import PodView
from rolloutfleet_operator.loop.plan import Plan, WorkerRecord
from rolloutfleet_operator.loop.status import (
    build_status,
    connections_condition,
    invalid_spec_status,
    league_status,
    nonfinite,
    progress,
    status_changed,
)


def pod(index: int, ready: bool = True) -> PodView:
    return PodView(
        name=f"j-worker-{index}", uid=f"u{index}", index=index, template_hash="h", phase="Running", ready=ready
    )


def conditions(status: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {c["type"]: c["status"] for c in status["conditions"]}


def test_running_when_every_desired_worker_is_ready() -> None:
    status = build_status("j", False, Plan(desired=2), [pod(0), pod(1)], generation=3, now=0.0)
    assert (status["phase"], status["readyReplicas"], status["replicas"], status["observedGeneration"]) == (
        "Running",
        2,
        2,
        3,
    )
    assert conditions(status) == {"Ready": "True", "Degraded": "False", "Failed": "False"}
    assert all(c["observedGeneration"] == 3 for c in status["conditions"])


def test_pending_degraded_failed_suspended() -> None:
    assert build_status("j", False, Plan(desired=2), [pod(0, False)], 1, 0.0)["phase"] == "Pending"
    backing_off = Plan(
        desired=2, records={1: WorkerRecord(restarts=1, restart_at=5.0, last_error="exited with code 1")}
    )
    degraded = build_status("j", False, backing_off, [pod(0)], 1, 0.0)
    assert degraded["phase"] == "Degraded" and "exited with code 1" in degraded["message"] and degraded["restarts"] == 1
    down = Plan(desired=1, records={0: WorkerRecord(restarts=3, down=True, last_error="no such env")})
    failed = build_status("j", False, down, [], 1, 0.0)
    assert (
        failed["phase"] == "Failed"
        and failed["reason"] == "RestartBudgetExhausted"
        and "no such env" in failed["message"]
    )
    assert conditions(failed)["Failed"] == "True"
    assert build_status("j", True, Plan(desired=0), [], 1, 0.0)["phase"] == "Suspended"


def test_transition_time_moves_only_when_the_condition_flips() -> None:
    first = build_status("j", False, Plan(desired=1), [pod(0, False)], 1, now=1000.0)
    same = build_status("j", False, Plan(desired=1), [pod(0, False)], 1, now=2000.0, previous=first)
    flipped = build_status("j", False, Plan(desired=1), [pod(0)], 1, now=3000.0, previous=same)
    ready = lambda s: next(c for c in s["conditions"] if c["type"] == "Ready")  # noqa: E731
    assert ready(same)["lastTransitionTime"] == ready(first)["lastTransitionTime"]
    assert ready(flipped)["lastTransitionTime"] != ready(first)["lastTransitionTime"]


def test_progress_sums_fresh_heartbeats_of_current_workers() -> None:
    beats = {
        0: {"env_steps": 1000, "steps_per_s": 50.0, "time": 95.0},
        1: {"env_steps": 500, "steps_per_s": 25.0, "time": 10.0},  # stale: its rate no longer counts
        5: {"env_steps": 9999, "steps_per_s": 99.0, "time": 99.0},  # scaled away
    }
    assert progress(beats, desired=2, now=100.0) == (1500, 50.0)


def test_nan_counts_of_current_workers_reach_the_status_only_when_there_are_any() -> None:
    clean = {0: {"env_steps": 10, "nonfinite_obs": 0, "time": 1.0}, 1: {"env_steps": 5}}  # 1: an older worker
    assert nonfinite(clean, desired=2) == {}
    assert "nonFinite" not in build_status("j", False, Plan(desired=2), [pod(0), pod(1)], 1, 0.0, beats=clean)
    beats = {
        0: {"nonfinite_obs": 4, "nonfinite_rewards": 0, "filter_quarantined": 4},
        1: {"nonfinite_obs": 1, "nonfinite_rewards": 2, "filter_quarantined": 0},
        3: {"nonfinite_obs": 100},  # scaled away
    }
    status = build_status("j", False, Plan(desired=2), [pod(0), pod(1)], 1, 0.0, beats=beats)
    assert status["nonFinite"] == {"observations": 5, "rewards": 2, "filterQuarantined": 4}


def test_an_invalid_spec_fails_the_job_with_the_reason() -> None:
    status = invalid_spec_status("j", "spec cannot be used: spec.env.id: unknown", 2, 0.0, None)
    assert status["phase"] == "Failed" and status["reason"] == "InvalidSpec" and conditions(status)["Ready"] == "False"


def test_waiting_workers_say_why() -> None:
    # What kube-scheduler and the kubelet write into pods that cannot start.
    unschedulable = PodView(
        name="j-worker-0", uid="u0", index=0, template_hash="h", phase="Pending",
        waiting_reason="Unschedulable",
        waiting_message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
    )  # fmt: skip
    no_image = PodView(
        name="j-worker-1", uid="u1", index=1, template_hash="h", phase="Pending",
        waiting_reason="ImagePullBackOff", waiting_message='Back-off pulling image "rolloutfleet/worker:typo"',
    )  # fmt: skip
    pending = build_status("j", False, Plan(desired=3), [unschedulable, no_image], 1, 0.0)
    assert pending["phase"] == "Pending"
    assert pending["reason"] in ("ImagePullBackOff", "Unschedulable")
    assert (
        "worker(s) 0 waiting: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
        in (pending["message"])
    )
    assert (
        'worker(s) 1 waiting: ImagePullBackOff: Back-off pulling image "rolloutfleet/worker:typo"'
        in (pending["message"])
    )
    ready = next(c for c in pending["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["message"] == pending["message"]
    # Once running, a ready worker's past wait is not reported.
    assert "waiting" not in build_status("j", False, Plan(desired=1), [pod(0)], 1, 0.0)["message"]


def test_a_status_changes_only_where_a_merge_patch_would_change_it() -> None:
    stored = {"phase": "Running", "workers": {"0": {"restarts": 1}}, "conditions": [{"type": "Ready"}]}
    assert not status_changed(stored, {"phase": "Running"})
    # A merge patch deletes the keys it sets to null: the stored status has no such key.
    assert not status_changed(stored, {"workers": {"0": {"restarts": 1, "restartAt": None}}})
    assert not status_changed(stored, {"conditions": [{"type": "Ready", "reason": None}]})
    assert status_changed(stored, {"phase": "Degraded"})
    assert status_changed(stored, {"envSteps": 0})  # a key not stored yet


def test_refused_weights_reach_the_status_per_policy_and_version_and_leave_it_when_none() -> None:
    from rolloutfleet_operator.loop.status import weights_refused

    shape = "weights do not fit the model: 'pi.weight' has shape (3, 64), expected (2, 64)"
    beats = {
        0: {"weights_refused": {"default": (4, shape)}},
        1: {"weights_refused": {"default": (4, shape), "red": (2, "'vf.bias' holds 1 NaN/inf values")}},
        2: {"env_steps": 5},  # holds no refused version
        7: {"weights_refused": {"default": (4, shape)}},  # scaled away
    }
    status = build_status("j", False, Plan(desired=3), [pod(0), pod(1), pod(2)], 1, 0.0, beats=beats)
    assert status["weightsRefused"] == [
        {"policy": "default", "version": 4, "workers": 2, "reason": shape,
         "message": f"weights v4 refused by 2 workers: {shape}"},
        {"policy": "red", "version": 2, "workers": 1, "reason": "'vf.bias' holds 1 NaN/inf values",
         "message": "policy red: weights v2 refused by 1 worker: 'vf.bias' holds 1 NaN/inf values"},
    ]  # fmt: skip
    assert weights_refused({0: {"env_steps": 1}}, desired=1) == []
    cleared = build_status("j", False, Plan(desired=1), [pod(0)], 1, 0.0, previous=status, beats={0: {}})
    # null in the merge patch: the stored field is removed, and the change is seen as one
    assert cleared["weightsRefused"] is None and status_changed(status, cleared)


def test_the_crd_allows_every_field_of_weights_refused() -> None:
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[4]
    for path in (root / "crds", root / "charts" / "rolloutfleet" / "crds"):
        crd = next(d for d in yaml.safe_load_all((path / "rolloutjobs.rolloutfleet.io.yaml").read_text()) if d)
        status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        field = status["weightsRefused"]
        assert field["type"] == "array" and field["nullable"] is True
        assert set(field["items"]["properties"]) == {"policy", "version", "workers", "reason", "message"}


def waiting_beat(since: float, at: float) -> dict[str, float]:
    return {"env_steps": 100.0, "steps_per_s": 0.0, "time": at, "waiting_for_learner_since": since}


def test_ready_workers_waiting_for_a_learner_show_it_since_when_and_the_job_stays_running() -> None:
    beats = {0: waiting_beat(1000.0, 1190.0), 1: waiting_beat(1030.0, 1195.0)}
    status = build_status("j", False, Plan(desired=2), [pod(0), pod(1)], 4, now=1200.0, beats=beats, namespace="rl")
    assert (status["phase"], status["reason"], status["readyReplicas"]) == ("Running", "WaitingForLearner", 2)
    since = "1970-01-01T00:16:40Z"  # unix 1000: the earliest worker's
    line = f"2/2 workers waiting for a learner to read rolloutfleet:{{rl/j}}:batches since {since}"
    assert status["message"] == "2/2 workers ready; " + line
    waiting = next(c for c in status["conditions"] if c["type"] == "WaitingForLearner")
    assert waiting == {
        "type": "WaitingForLearner", "status": "True", "reason": "WaitingForLearner", "message": line,
        "observedGeneration": 4, "lastTransitionTime": since,
    }  # fmt: skip
    assert conditions(status)["Ready"] == "True" and conditions(status)["Degraded"] == "False"
    # Still waiting later (worker 0 replaced, waiting since later): the condition keeps its time.
    beats = {0: waiting_beat(1500.0, 1590.0), 1: waiting_beat(1030.0, 1595.0)}
    later = build_status("j", False, Plan(desired=2), [pod(0), pod(1)], 4, 1600.0, status, beats, "rl")
    assert next(c for c in later["conditions"] if c["type"] == "WaitingForLearner")["lastTransitionTime"] == since
    # A learner reads: the workers' heartbeats no longer wait, the condition turns False, now.
    reading = {i: {"env_steps": 500.0, "steps_per_s": 900.0, "time": 1700.0} for i in (0, 1)}
    after = build_status("j", False, Plan(desired=2), [pod(0), pod(1)], 4, 1700.0, later, reading, "rl")
    assert (after["reason"], after["message"]) == ("AllWorkersReady", "2/2 workers ready")
    ended = next(c for c in after["conditions"] if c["type"] == "WaitingForLearner")
    assert (ended["status"], ended["reason"], ended["lastTransitionTime"]) == (
        "False",
        "NotWaiting",
        "1970-01-01T00:28:20Z",
    )


def test_only_fresh_heartbeats_of_ready_current_workers_count_as_waiting() -> None:
    beats = {
        0: waiting_beat(1000.0, 1190.0),  # counted
        1: waiting_beat(1000.0, 1100.0),  # stale: the worker has not said so for 100 s
        2: waiting_beat(1000.0, 1190.0),  # its pod is not ready
        3: waiting_beat(1000.0, 1190.0),  # beyond replicas (scaled down)
    }
    pods = [pod(0), pod(1), pod(2, ready=False), pod(3)]
    status = build_status("j", False, Plan(desired=3), pods, 1, now=1200.0, beats=beats)
    assert status["phase"] == "Degraded" and status["reason"] == "WorkersNotReady"
    assert "1/3 workers waiting for a learner to read rolloutfleet:{default/j}:batches" in status["message"]
    assert conditions(status)["WaitingForLearner"] == "True"


def test_a_job_that_never_waited_has_no_waiting_condition() -> None:
    beats = {0: {"env_steps": 1.0, "time": 10.0, "waiting_for_learner_since": 0.0}}
    status = build_status("j", False, Plan(desired=1), [pod(0)], 1, now=12.0, beats=beats)
    assert set(conditions(status)) == {"Ready", "Degraded", "Failed"} and status["reason"] == "AllWorkersReady"


def test_disruptions_are_shown_apart_from_restarts_every_kind_listed() -> None:
    from pathlib import Path

    import yaml

    from rolloutfleet_operator.children.disruptions import KINDS

    the_plan = Plan(desired=2, records={1: WorkerRecord(disruptions=2)}, disruptions={"Evicted": 1, "NodeTainted": 1})
    status = build_status("j", False, the_plan, [pod(0), pod(1)], generation=1, now=0.0)
    assert status["restarts"] == 0 and status["phase"] == "Running"
    assert status["disruptions"] == {**dict.fromkeys(KINDS, 0), "Evicted": 1, "NodeTainted": 1}
    assert status["workers"]["1"]["disruptions"] == 2
    root = Path(__file__).resolve().parents[4]
    crd = next(d for d in yaml.safe_load_all((root / "crds" / "rolloutjobs.rolloutfleet.io.yaml").read_text()) if d)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert list(schema["disruptions"]["properties"]) == list(KINDS)
    assert set(WorkerRecord().to_status()) == set(schema["workers"]["additionalProperties"]["properties"])


def test_a_worker_down_for_a_missing_module_says_so_and_the_status_names_the_image() -> None:
    line = "missing Python module 'torch': the slim worker image (numpy policies) has no torch, CUDA or OpenCV"
    down = Plan(desired=1, records={0: WorkerRecord(down=True, last_error=line, lacks_module="h")})
    status = build_status("j", False, down, [], 1, 0.0, image="ghcr.io/rolloutfleet/worker:0.1.0-slim")
    assert (status["phase"], status["reason"]) == ("Failed", "MissingModule")
    assert status["message"] == f"worker(s) 0 down until the spec changes: {line}"
    assert status["image"] == "ghcr.io/rolloutfleet/worker:0.1.0-slim"


def test_a_fleet_past_maxclients_is_told_and_the_clients_of_others_count() -> None:
    # Redis's own default maxclients (10 000) and the two connections a worker holds.
    over = connections_condition(10_000, 0, 2, 5_001, 0, 3, 100.0)
    assert (over["type"], over["status"], over["reason"]) == ("RedisConnectionsFit", "False", "OverMaxClients")
    assert over["message"].startswith("5001 workers x 2 connections = 10002, and 0 other clients, pass")
    assert "redis.maxClients" in over["message"] and over["observedGeneration"] == 3
    assert connections_condition(10_000, 0, 2, 5_000, 0, 3, 100.0)["status"] == "True"
    # 4 000 workers up, holding 8 000 of the 9 500 clients: 1 500 are another job's or learners'.
    crowded = connections_condition(10_000, 9_500, 2, 4_300, 4_000, 3, 100.0)
    assert crowded["status"] == "False" and "8600, and 1500 other clients" in crowded["message"]
    # Workers not connected yet (pending pods) are not taken for others' clients.
    assert connections_condition(10, 0, 2, 5, 5, 3, 100.0)["status"] == "True"


def test_the_connections_condition_moves_its_transition_time_only_when_it_flips() -> None:
    first = connections_condition(100, 0, 2, 60, 0, 1, 100.0)
    again = connections_condition(100, 0, 2, 70, 0, 2, 200.0, [first])
    assert again["lastTransitionTime"] == first["lastTransitionTime"] and again["observedGeneration"] == 2
    flipped = connections_condition(100, 0, 2, 10, 0, 3, 300.0, [again])
    assert flipped["status"] == "True" and flipped["lastTransitionTime"] != first["lastTransitionTime"]


def test_the_league_status_shows_the_standings_or_why_there_are_none_and_leaves_without_a_league() -> None:
    from rolloutfleet.league.ratings import Elo
    from rolloutfleet.league.standings import standings_of
    from rolloutfleet.spec.sections.league_spec import LeagueSpec

    assert league_status(None, None) == {"league": None}  # null: a merge patch removes the field
    waiting = league_status(LeagueSpec(opponent="main_v1"), None)["league"]
    assert waiting["mainRating"] is None and waiting["message"].startswith("no standings yet")
    elo = Elo()
    elo.record({"main": 1.0, "main-000010": -1.0})
    shown = league_status(LeagueSpec(opponent="main_v1"), standings_of(elo, "main", snapshots=1, matches=1, at=0.0))
    assert shown["league"]["mainRank"] == 1 and shown["league"]["top"][0] == {
        "policy": "main",
        "rating": 1016.0,
        "games": 1,
    }


def test_the_crd_allows_every_field_of_the_league_status() -> None:
    from pathlib import Path

    import yaml

    from rolloutfleet.league.ratings import Elo
    from rolloutfleet.league.standings import standings_of
    from rolloutfleet.spec.sections.league_spec import LeagueSpec

    elo = Elo()
    elo.record({"main": 1.0, "v1": -1.0})
    status = league_status(LeagueSpec(opponent="v1"), standings_of(elo, "main", snapshots=1, matches=1))["league"]
    root = Path(__file__).resolve().parents[4]
    for path in (root / "crds", root / "charts" / "rolloutfleet" / "crds"):
        crd = next(d for d in yaml.safe_load_all((path / "rolloutjobs.rolloutfleet.io.yaml").read_text()) if d)
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        assert set(schema["league"]["properties"]) == set(status)
        assert set(schema["league"]["properties"]["top"]["items"]["properties"]) == set(status["top"][0])
