#!/usr/bin/env bash
# The one way Python dependencies are installed, by `make install` (CI) and by the images,
# so every environment gets exactly the versions of requirements.lock.
#
#   hack/pip-install.sh VENV PROFILE [PART]
#
# PROFILE:
#   dev          everything in requirements.lock (tests, linters) + the packages, editable
#   worker-cpu   the worker package with its runtime extras (worker, multiagent, atari); torch from PyTorch's CPU index
#                (the PyPI wheel is the CUDA build: ~3 GB that a CPU pod never uses)
#   worker-cuda  the same with PyPI's torch, which bundles the CUDA runtime (the node
#                needs only the NVIDIA driver and device plugin)
#   worker-slim  the same without torch and OpenCV (NUMPY_ONLY below): what a job whose policies
#                act in numpy needs (gymnasium, PettingZoo's classic games, ale-py, Redis,
#                Prometheus); image observations need the CNN, hence torch: another image
#   operator     the operator package and the worker's core (the spec model): no torch,
#                no gymnasium
# Non-dev profiles install only what the packages require, each pinned by the lock (-c).
# worker-slim installs the packages' declared requirements (PART deps) and then the packages
# alone (PART package), even for PART all: `pip install worker[worker]` would bring torch.
#
# PART (non-dev profiles; default all): the images install in two layers, so that a
# source change does not reinstall torch:
#   all          the packages and their dependencies
#   deps         only the third-party dependencies the packages declare (read from their
#                pyproject.toml: needs no sources), pinned by the lock
#   package      only the packages (--no-deps), over a venv `deps` made; `pip check` then
#                proves no dependency is missing
set -euo pipefail

venv="${1:?usage: pip-install.sh VENV PROFILE [all|deps|package]}"
profile="${2:?usage: pip-install.sh VENV PROFILE [all|deps|package]}"
part="${3:-all}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lock="$root/requirements.lock"
torch_cpu_index="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"

case "$part" in
  all) ;;
  deps | package)
    [[ "$profile" != dev ]] || { echo "profile dev installs everything: no PART" >&2; exit 2; }
    ;;
  *)
    echo "unknown part '$part' (all | deps | package)" >&2
    exit 2
    ;;
esac

# What the slim worker leaves out of the extras it installs: torch (with its CUDA and nvidia
# wheels) and OpenCV, needed only by image wrappers, whose observations need the CNN anyway.
NUMPY_ONLY="torch opencv-python-headless"

# The third-party requirements that the pyproject.toml of each PATH[extras] declares, one
# per line; our own packages and those named in $LEAVE_OUT are left out.
declared_requirements() {
  LEAVE_OUT="${LEAVE_OUT:-}" "$venv/bin/python" - "$@" <<'PY'
import os
import re
import sys
import tomllib
from pathlib import Path


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


wanted = []
for arg in sys.argv[1:]:
    path, _, extras = arg.partition("[")
    project = tomllib.loads(Path(path, "pyproject.toml").read_text())["project"]
    wanted.append((project, [e.strip() for e in extras.rstrip("]").split(",") if e.strip()]))
ours = {canonical(project["name"]) for project, _ in wanted}
ours |= {canonical(name) for name in os.environ["LEAVE_OUT"].split()}
seen = set()
for project, extras in wanted:
    requirements = list(project.get("dependencies", []))
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    for requirement in requirements:
        name = canonical(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))
        if name not in ours and requirement not in seen:
            seen.add(requirement)
            print(requirement)
PY
}

[[ -x "$venv/bin/python" ]] || "${PYTHON:-python3}" -m venv "$venv"
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check)

case "$profile" in
  dev)
    "${pip[@]}" -r "$lock"
    editable=(-e "$root/worker")
    [[ -f "$root/operator/pyproject.toml" ]] && editable+=(-e "$root/operator")
    "${pip[@]}" --no-deps "${editable[@]}"
    exit 0
    ;;
  worker-cpu | worker-cuda)
    packages=("$root/worker[worker,multiagent,atari]")
    ;;
  worker-slim)
    packages=("$root/worker[worker,multiagent,atari]")
    leave_out="$NUMPY_ONLY"
    ;;
  operator)
    packages=("$root/worker" "$root/operator")
    ;;
  *)
    echo "unknown profile '$profile' (dev | worker-cpu | worker-cuda | worker-slim | operator)" >&2
    exit 2
    ;;
esac

if [[ "$profile" == worker-cpu && "$part" != package ]]; then
  torch_pin="$(grep -E '^torch==' "$lock")" || { echo "no torch pin in $lock" >&2; exit 1; }
  "${pip[@]}" -c "$lock" --index-url "$torch_cpu_index" "$torch_pin"
fi
if [[ "$profile" == worker-slim && "$part" == all ]]; then
  "$0" "$venv" "$profile" deps
  exec "$0" "$venv" "$profile" package
fi
case "$part" in
  all)
    "${pip[@]}" -c "$lock" "${packages[@]}"
    ;;
  deps)
    declared="$(LEAVE_OUT="${leave_out:-}" declared_requirements "${packages[@]}")"
    mapfile -t requirements <<<"$declared"
    "${pip[@]}" -c "$lock" "${requirements[@]}"
    ;;
  package)
    "${pip[@]}" --no-deps "${packages[@]}"
    broken="$("$venv/bin/pip" check 2>&1)" || { echo "$broken" >&2; exit 1; }
    ;;
esac
