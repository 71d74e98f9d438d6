"""Before/after in one run: a bench of this checkout next to the same bench of another commit.

Usage: ``python -m bench.compare REF [--rounds 3] [--bench bench_sampling bench_multiagent] [-- ARGS]``

REF is checked out in a temporary git worktree; the two trees' benches run alternately
(``--rounds`` times each, so drift on a shared machine hits both alike), each with its own
``rolloutfleet`` on ``PYTHONPATH`` and the same interpreter and dependencies. For every table
row (a first column that is a number, e.g. ``envs``) it prints the median of each column for
REF and for this tree, and their ratio (this / REF); rows of a bench's second or later table
are keyed ``<first column>#<table>`` (e.g. ``64#2``); a markdown table's rows (``| path | 606 | ...``,
``bench_transport``) by their first cell and table. Ratios of the "ours/ceiling" kind
compare best: both sides measure their ceiling in the same process.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"-?[\d,]*\.?\d+%?")


def run(tree: Path, bench: str, args: list[str]) -> tuple[str, dict[str, list[float]]]:
    """One run of ``bench`` from ``tree``: its header columns and each row's numbers."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(tree / p) for p in ("worker", "operator", "."))}
    script = tree / "bench" / f"{bench}.py"
    done = subprocess.run([sys.executable, str(script), *args], cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:  # say why, not only that it failed
        sys.exit(f"{bench} of {tree} exited {done.returncode}:\n{done.stderr[-3000:]}")
    out = done.stdout
    header, table = "", 0
    rows: dict[str, list[float]] = {}
    for line in out.splitlines():
        tokens = line.split()
        if line.startswith("|"):  # a markdown table (bench_transport): keyed by its first cell
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if set(cells[0]) <= set("-: "):
                table += 1
                continue
            numbers = [_first_number(cell) for cell in cells[1:]]
            if any(n is not None for n in numbers):
                rows[f"{cells[0][:40]}#{table}"] = [n for n in numbers if n is not None]
            else:
                header = header or line.strip()
        elif tokens and tokens[0] in ("envs", "policies", "size", "workers"):
            header = header or line.strip()
            table += 1  # a bench may print several tables with the same first column (envs)
        elif tokens and tokens[0].isdigit():
            key = tokens[0] if table <= 1 else f"{tokens[0]}#{table}"
            rows[key] = [float(t.rstrip("%x").replace(",", "")) for t in tokens[1:] if NUMBER.fullmatch(t)]
    return header, rows


def _first_number(cell: str) -> float | None:
    """The first number of a table cell (``1,234 MB/s`` -> 1234.0), None if it has none."""
    match = NUMBER.search(cell)
    return float(match.group().rstrip("%").replace(",", "")) if match else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ref", help="the commit to compare with (e.g. main~3, a tag, a sha)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bench", nargs="+", default=["bench_sampling", "bench_multiagent"])
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    opts = parser.parse_args(argv[:split])
    opts.args = argv[split + 1 :]  # for each bench
    sha = subprocess.run(["git", "rev-parse", "--short", opts.ref], cwd=REPO, capture_output=True, text=True)
    if sha.returncode != 0:
        parser.error(f"ref {opts.ref!r}: {sha.stderr.strip()}")
    with tempfile.TemporaryDirectory(prefix="rolloutfleet-compare-") as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--quiet", "--detach", str(before), opts.ref], cwd=REPO, check=True)
        try:
            for bench in opts.bench:
                compare(bench, before, opts.rounds, opts.args, sha.stdout.strip())
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=REPO, check=False)


def compare(bench: str, before: Path, rounds: int, args: list[str], ref: str) -> None:
    samples: dict[str, dict[str, list[list[float]]]] = {"ref": {}, "this": {}}
    header = ""
    for _ in range(rounds):
        for side, tree in (("ref", before), ("this", REPO)):
            header, rows = run(tree, bench, args)
            for key, numbers in rows.items():
                samples[side].setdefault(key, []).append(numbers)
    print(f"{bench}: {ref} vs this tree, medians of {rounds} alternating runs; ratio = this / {ref}")
    print(f"  columns after the first of: {header}")
    for key in samples["this"]:
        if key not in samples["ref"]:
            continue
        old = [statistics.median(col) for col in zip(*samples["ref"][key], strict=False)]
        new = [statistics.median(col) for col in zip(*samples["this"][key], strict=False)]
        cells = [f"{o:,.3g} -> {n:,.3g} ({n / o:.2f}x)" if o else f"{o} -> {n}" for o, n in zip(old, new, strict=False)]
        print(f"  {key:>7}: " + " | ".join(cells))


if __name__ == "__main__":
    main()
