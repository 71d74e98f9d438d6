"""Resident memory of a process tree, read from ``/proc`` (Linux; no psutil).

:func:`fleet_memory` finds the processes of a ``rolloutfleet run``: the supervisor itself
and each of its children (workers, learner, embedded redis-server), each child with its
own descendants summed in (an ``async`` vector env's subprocesses count for their worker).
RSS is ``VmRSS`` of ``/proc/<pid>/status``; ``RssAnon`` beside it is the part not backed
by files (heap, arenas): where a leak shows, while shared-library pages come and go.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessMemory:
    pid: int
    rss_kb: int
    rss_anon_kb: int
    processes: int  # the process and its descendants, summed


def parent_pids() -> dict[int, int]:
    """pid -> ppid of every process we can see."""
    parents = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
        parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    return parents


def status_kb(pid: int) -> tuple[int, int] | None:
    """(VmRSS, RssAnon) in kB from /proc/<pid>/status; None once the process is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    values = {}
    for line in lines:
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon"):
            values[key] = int(rest.split()[0])
    if "VmRSS" not in values:
        return None  # a zombie has no memory left
    return values["VmRSS"], values.get("RssAnon", 0)


def name_of(pid: int) -> str | None:
    """What a child of the supervisor is: ``worker-<i>``, ``learner``, ``redis-server``."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    words = [a.decode(errors="replace") for a in argv if a]
    if words and Path(words[0]).name.startswith("redis-server"):
        return "redis-server"
    if "bench.soak_learner" in words:
        return "learner"
    if "rolloutfleet.cli.main" in words and "worker" in words:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return None
        for item in environ:
            if item.startswith(b"ROLLOUTFLEET_WORKER_INDEX="):
                return f"worker-{int(item.split(b'=', 1)[1])}"
        return "worker-?"
    return None


def fleet_memory(supervisor: int) -> dict[str, ProcessMemory]:
    """The supervisor and each of its children, every one with its own descendants summed in."""
    parents = parent_pids()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)

    def tree(root: int) -> list[int]:
        pids, todo = [], [root]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            todo += children.get(pid, [])
        return pids

    def measure(root: int, pids: Iterable[int]) -> ProcessMemory | None:
        rss = anon = count = 0
        for pid in pids:
            kb = status_kb(pid)
            if kb is None:
                if pid == root:
                    return None
                continue
            rss, anon, count = rss + kb[0], anon + kb[1], count + 1
        return ProcessMemory(root, rss, anon, count)

    found: dict[str, ProcessMemory] = {}
    own = measure(supervisor, [supervisor])
    if own is not None:
        found["supervisor"] = own
    for child in children.get(supervisor, []):
        name = name_of(child)
        if name is not None and (memory := measure(child, tree(child))) is not None:
            found[name] = memory
    return found
