"""Exactly what the operator may do, for the chart's Role/ClusterRole (a test keeps the
chart's rules equal to these, and the e2e tests run the operator under them). Each rule
and why it is needed: docs/operations/operator.md ("What it may do, and why").
"""

from __future__ import annotations

from typing import Any

Rule = dict[str, Any]

NAMESPACED: list[Rule] = [
    {"apiGroups": ["rolloutfleet.io"], "resources": ["rolloutjobs"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["rolloutfleet.io"], "resources": ["rolloutjobs/status"], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "create", "delete"]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list", "watch", "create", "patch"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["create", "patch"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["create", "patch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": ["kopf.dev"], "resources": ["kopfpeerings"], "verbs": ["get", "list", "watch", "patch"]},
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["workloads"],
        "verbs": ["list", "watch", "create", "patch", "delete"],
    },
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["patch"]},
]
"""Rules in each watched namespace (a Role per namespace, or part of the ClusterRole)."""

CLUSTER: list[Rule] = [
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["kopf.dev"], "resources": ["clusterkopfpeerings"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["resourceflavors", "workloadpriorityclasses"], "verbs": ["get"]},
]
"""Cluster-scoped rules, needed in both modes."""

RULES: list[Rule] = NAMESPACED + CLUSTER
