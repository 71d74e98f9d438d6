"""RLlib's PPO through a RolloutFleet fleet next to RLlib's own env runners: one config (RLlib's
PPO, the job's network, one fragment of every worker per train batch), one run, alternating.

* fleet: ``rolloutfleet run examples/cartpole.yaml -- <RLlib venv> -m rolloutfleet.examples.rllib_learner``
  (2 worker processes x 8 CartPoles, their batches through Redis, RLlib's PPO in the learner);
* RLlib: the same learner with ``--peer``: ``num_env_runners`` = the job's replicas (2 Ray actors
  x 8 CartPoles, ``rollout_fragment_length`` the job's), no fleet, no Redis.

Each run stops when RLlib's ``episode_return_mean`` averages the target (450) over 5 training
iterations, or at the time limit. Figures: env steps/s while training (sampled env steps over
the time from the algorithm built to the stop), env steps and seconds to the target, and the
wall time of the whole command (Ray and the fleet starting included). The fleet samples on
while the learner trains; the rows it sampled with weights more than one version old
(``max_policy_lag`` 1) are not trained on, so "rows trained on" is the figure of sample
efficiency and "env steps sampled" the figure of speed. Medians over
``--repeats``; the ratio is the fleet's over RLlib's. The table also goes to
``out/bench/bench_rllib.json``.

Usage: ``python -m bench.bench_rllib --rllib-python .venv-rllib/bin/python --rolloutfleet .venv/bin/rolloutfleet [--repeats 3]``
(``make bench-rllib``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.results import OUT, Table, machine, write

MANIFEST = "examples/cartpole.yaml"


def run(rllib_python: str, rolloutfleet: str, peer: bool, target: float, time_limit: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        learner = [rllib_python, "-m", "rolloutfleet.examples.rllib_learner", MANIFEST, "--target-return", str(target),
                   "--time-limit", str(time_limit), "--json", str(out)]  # fmt: skip
        command = [*learner, "--peer"] if peer else [rolloutfleet, "run", MANIFEST, "--no-status", "--", *learner]
        began = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, timeout=time_limit + 300)
        wall = time.monotonic() - began
        if not out.exists():
            raise SystemExit(f"{' '.join(command)} wrote no result (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")  # fmt: skip
        result: dict[str, Any] = json.loads(out.read_text())
    result["wall_s"] = wall
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rllib-python", required=True, help="the RLlib venv's python (make install-rllib)")
    parser.add_argument("--rolloutfleet", required=True, help="the rolloutfleet command that runs the fleet")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--target-return", type=float, default=450.0)
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, Any]]] = {"fleet": [], "rllib": []}
    for repeat in range(args.repeats):
        for name in ("fleet", "rllib"):
            result = run(args.rllib_python, args.rolloutfleet, name == "rllib", args.target_return, args.time_limit)
            runs[name].append(result)
            print(f"run {repeat + 1} {name}: {result['env_steps']} env steps in {result['seconds']:.1f} s "
                  f"({result['env_steps_per_s']:.0f}/s), solved {result['solved']}, wall {result['wall_s']:.1f} s", flush=True)  # fmt: skip

    def median(name: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in runs[name])

    table = Table(f"RLlib PPO on CartPole-v1, to a mean return of {args.target_return:g}, median of {args.repeats}",
                  "runner", ["env_steps_per_s"])  # fmt: skip
    print(f"\n{'':34}{'fleet':>12}{'RLlib':>12}{'fleet/RLlib':>14}")
    for key, label in (("env_steps_per_s", "env steps/s sampled while training"), ("env_steps", "env steps sampled to the target"),
                       ("rows_trained", "rows trained on to the target"), ("seconds", "seconds to the target"),
                       ("wall_s", "wall seconds, whole command")):  # fmt: skip
        ours, theirs = median("fleet", key), median("rllib", key)
        print(f"{label:34}{ours:12.1f}{theirs:12.1f}{ours / theirs:13.2f}x")
    solved = {name: sum(bool(r["solved"]) for r in runs[name]) for name in runs}
    print(f"{'solved':34}{solved['fleet']:>9}/{args.repeats}{solved['rllib']:>9}/{args.repeats}")
    for name in runs:
        table.rows.append({"runner": name, **{key: median(name, key) for key in ("env_steps_per_s", "env_steps", "rows_trained", "seconds", "wall_s")},
                           "solved": solved[name]})  # fmt: skip
    write("bench_rllib", [table], machine(repeats=args.repeats), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
