"""Exactly what the operator may do, for the chart's Role/ClusterRole (a test keeps the
chart's rules equal to these, and the e2e tests run the operator under them).

| rule | why |
| --- | --- |
| rolloutjobs: get, list, watch, patch | watch jobs; kopf's finalizer (timers stop cleanly on deletion) |
| rolloutjobs/status: get, patch | phase, conditions, restart records, progress |
| pods: list, watch, create, delete | the worker pods (deterministic names; never updated in place) |
| poddisruptionbudgets (policy): list, watch, create, patch | each job's ``<job>-workers`` budget, kept as the spec says (watched: no read per reconcile) |
| services: create, patch | an external env's ``<job>-external`` Service (``spec.env.external``; owner reference: the garbage collector deletes it) |
| networkpolicies (networking.k8s.io): create, patch | each job's ``<job>-egress`` policy (``ROLLOUTFLEET_WORKER_NETWORK_POLICY``; owner reference: deleted with the job); never read, listed or deleted |
| secrets: get, create, patch | get: the Redis password of a job (``spec.redis.passwordSecret``) for status progress, its ``spec.redis.adminSecret``, and its per-job users' Secrets; create: ``<job>-redis-worker`` and ``<job>-redis-learner`` (owner reference: the garbage collector deletes them, so no delete); patch: retire their previous passwords' hashes (:mod:`.redis_users`). No list or watch: the operator never reads Secrets it does not name |
| events (core/v1): create | what the operator did and why (kopf only ever posts new core Events) |
| kopfpeerings (namespaced) / clusterkopfpeerings: get, list, watch, patch | several replicas: one active |
| workloads (kueue.x-k8s.io): list, watch, create, delete | a Kueue-queued job's Workload (never updated: a changed job gets a new one) |
| workloads/status: patch | hand an evicted Workload's quota back once its pods are gone (as Kueue's own job controllers do) |
| resourceflavors, workloadpriorityclasses (cluster-wide): get | the admitted flavor's node labels and tolerations; the priority of ``kueue.x-k8s.io/priority-class`` |
| customresourcedefinitions: get, list, watch (cluster-wide, read-only) | kopf discovers the RolloutJob resource |
| namespaces: list, watch (cluster-wide, read-only) | kopf matches the watched namespaces against the existing ones |
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
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["list", "watch", "create", "delete"]},
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
