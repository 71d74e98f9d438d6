"""spec.disruption and spec.template.metadata: what a job may ask, and one line naming
the field for what it may not."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet.spec.job import RolloutJob, SpecError


def spec_of(**spec: Any) -> Any:
    return RolloutJob.from_dict({"metadata": {"name": "j"}, "spec": {"env": {"id": "CartPole-v1"}, **spec}}).spec


def test_defaults_bound_a_drain_and_replace_workers_of_a_lost_node_well_before_300_s() -> None:
    spec = spec_of()
    assert spec.disruption.max_unavailable == "25%" and spec.disruption.node_loss_seconds == 30
    assert spec.template.metadata.labels == {} and spec.template.metadata.annotations == {}


@pytest.mark.parametrize("value", [0, 1, 500, "0%", "5%", "25%", "100%"])
def test_max_unavailable_is_a_count_or_a_percentage(value: int | str) -> None:
    assert spec_of(disruption={"maxUnavailable": value}).disruption.max_unavailable == value


def test_good_labels_and_annotations_pass() -> None:
    metadata = {
        "labels": {
            "team": "rl",
            "cost-center": "",
            "kueue.x-k8s.io/pod-group-name": "g-1",
            "app.kubernetes.io/part-of": "x",
        },
        "annotations": {"sidecar.istio.io/inject": "false", "note": "any text, even / and spaces"},
    }
    assert spec_of(template={"metadata": metadata}).template.metadata.labels["team"] == "rl"


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"disruption": {"maxUnavailable": -1}}, "spec.disruption.maxUnavailable", "count >= 0"),
        ({"disruption": {"maxUnavailable": "101%"}}, "spec.disruption.maxUnavailable", "percentage"),
        ({"disruption": {"maxUnavailable": "2"}}, "spec.disruption.maxUnavailable", "percentage"),
        ({"disruption": {"maxUnavailable": True}}, "spec.disruption.maxUnavailable", "count"),
        ({"disruption": {"nodeLossSeconds": -1}}, "spec.disruption.nodeLossSeconds", "greater than or equal"),
        ({"disruption": {"nodeLossSeconds": 7200}}, "spec.disruption.nodeLossSeconds", "less than or equal"),
        ({"disruption": {"maxUnavialable": 1}}, "spec.disruption.maxUnavialable", "unknown field"),
        ({"template": {"metadata": {"labels": {"rolloutfleet.io/job": "x"}}}}, "spec.template.metadata.labels", "set by the operator"),
        ({"template": {"metadata": {"labels": {"app.kubernetes.io/managed-by": "me"}}}}, "spec.template.metadata.labels", "set by the operator"),
        ({"template": {"metadata": {"annotations": {"rolloutfleet.io/template-hash": "x"}}}}, "spec.template.metadata.annotations", "set by the operator"),
        ({"template": {"metadata": {"labels": {"team": "a b"}}}}, "spec.template.metadata.labels", "value 'a b'"),
        ({"template": {"metadata": {"labels": {"team": "x" * 64}}}}, "spec.template.metadata.labels", "at most 63"),
        ({"template": {"metadata": {"labels": {"Bad_Prefix.io/x": "1"}}}}, "spec.template.metadata.labels", "DNS subdomain"),
        ({"template": {"metadata": {"labels": {"-x": "1"}}}}, "spec.template.metadata.labels", "key '-x'"),
        ({"template": {"metadata": {"annotations": {"big": "x" * 300_000}}}}, "spec.template.metadata.annotations", "bytes"),
        ({"template": {"metadata": {"name": "x"}}}, "spec.template.metadata.name", "unknown field"),
        ({"template": {"spec": {}}}, "spec.template.spec", "unknown field"),
    ],
)  # fmt: skip
def test_each_mistake_names_its_field(spec: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as error:
        spec_of(**spec)
    message = str(error.value)
    assert message.startswith(field) and words in message, message
