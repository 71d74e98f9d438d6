"""The admin calls' pure parts: a Redis Cluster's nodes (replicas included), error lines without passwords."""

from __future__ import annotations

import redis

from rolloutfleet_operator.redis.admin import Admin, _line, cluster_nodes


def test_every_reachable_node_masters_and_replicas_gets_the_users() -> None:
    text = (
        "07c3 10.0.0.1:6379@16379,redis-0.redis myself,master - 0 0 1 connected 0-5460\n"
        "67ed 10.0.0.2:6379@16379 slave 07c3 0 1 1 connected\n"
        "292f [fd00::3]:6379@16379 master - 0 1 2 connected 5461-10922\n"
        "e7d1 10.0.0.4:6379@16379 master,fail - 0 1 3 disconnected\n"
        "6ec2 :0@0 slave,noaddr 292f 0 1 2 disconnected\n"
    )
    assert cluster_nodes(text) == [("10.0.0.1", 6379), ("10.0.0.2", 6379), ("fd00::3", 6379)]


def test_an_admin_error_names_the_node_and_never_the_password() -> None:
    admin = Admin("redis://r:6379/0", None, "p/#?@%")
    line = _line(admin, redis.ResponseError("WRONGPASS invalid username-password pair p/#?@%"))
    assert line.startswith("redis at r:6379 (admin credential of the operator): WRONGPASS") and "p/#?@%" not in line
