#!/usr/bin/env bash
# The one way Python dependencies are installed, by `make install` (CI) and by the images,
# so every environment gets exactly the versions of requirements.lock.
#
#   hack/pip-install.sh VENV PROFILE
#
# PROFILE:
#   dev          everything in requirements.lock (tests, linters) + the packages, editable
#   worker-cpu   the worker package with its runtime extras (worker, multiagent); torch from PyTorch's CPU index
#                (the PyPI wheel is the CUDA build: ~3 GB that a CPU pod never uses)
#   worker-cuda  the same with PyPI's torch, which bundles the CUDA runtime (the node
#                needs only the NVIDIA driver and device plugin)
#   operator     the operator package and the worker's core (the spec model): no torch,
#                no gymnasium
# Non-dev profiles install only what the packages require, each pinned by the lock (-c).
set -euo pipefail

venv="${1:?usage: pip-install.sh VENV PROFILE}"
profile="${2:?usage: pip-install.sh VENV PROFILE}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lock="$root/requirements.lock"
torch_cpu_index="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"

[[ -x "$venv/bin/python" ]] || "${PYTHON:-python3}" -m venv "$venv"
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check)

case "$profile" in
  dev)
    "${pip[@]}" -r "$lock"
    editable=(-e "$root/worker")
    [[ -f "$root/operator/pyproject.toml" ]] && editable+=(-e "$root/operator")
    "${pip[@]}" --no-deps "${editable[@]}"
    ;;
  worker-cpu)
    torch_pin="$(grep -E '^torch==' "$lock")" || { echo "no torch pin in $lock" >&2; exit 1; }
    "${pip[@]}" -c "$lock" --index-url "$torch_cpu_index" "$torch_pin"
    "${pip[@]}" -c "$lock" "$root/worker[worker,multiagent]"
    ;;
  worker-cuda)
    "${pip[@]}" -c "$lock" "$root/worker[worker,multiagent]"
    ;;
  operator)
    "${pip[@]}" -c "$lock" "$root/worker" "$root/operator"
    ;;
  *)
    echo "unknown profile '$profile' (dev | worker-cpu | worker-cuda | operator)" >&2
    exit 2
    ;;
esac
