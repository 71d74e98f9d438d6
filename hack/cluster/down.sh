#!/usr/bin/env bash
# Stop the control plane started by up.sh and remove its state dir.
#
#   hack/cluster/down.sh [STATE_DIR]      (default: <repo>/.cluster)
#
# Kills exactly the PIDs recorded in STATE_DIR/pids (TERM, then KILL after
# CLUSTER_STOP_GRACE seconds, default 10), checking each is still the program
# that was started. Idempotent: a missing state dir is not an error.
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

state="$(cluster_state_dir "${1:-}")"
if [[ ! -e "$state" ]]; then
  log "nothing to do: $state does not exist"
  exit 0
fi
cluster_check_deletable "$state"
"$cluster_repo_root/hack/kueue/down.sh" "$state"
cluster_stop_pids "$state"
rm -rf "$state"
log "down: removed $state"
