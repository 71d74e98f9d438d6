#!/usr/bin/env bash
# Stop the test kubelet that kubelet-up.sh started for STATE_DIR: SIGTERM (it kills its
# pods' processes and exits), SIGKILL after 20 s. Idempotent.
#
#   tests/cluster/kubelet-down.sh [STATE_DIR]    (default: <repo>/.cluster)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
state="${1:-$repo/.cluster}"
case "$state" in /*) ;; *) state="$PWD/$state" ;; esac
state="${state%/}"
# shellcheck source=tests/cluster/kubelet-lib.sh
source "$here/kubelet-lib.sh"

if ! kubelet_alive "$state"; then
  rm -f "$state/kubelet.pid"
  exit 0
fi
pid="$(cat "$state/kubelet.pid")"
kill -TERM "$pid"
for _ in $(seq 200); do kubelet_alive "$state" || break; sleep 0.1; done
if kubelet_alive "$state"; then
  printf '[kubelet] pid %s ignored TERM for 20 s; sending KILL\n' "$pid" >&2
  kill -KILL "$pid" 2>/dev/null || true
fi
rm -f "$state/kubelet.pid"
printf '[kubelet] stopped (pid %s)\n' "$pid" >&2
