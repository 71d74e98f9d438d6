#!/usr/bin/env bash
# Stop the Kueue manager hack/kueue/up.sh started for STATE_DIR (exactly the pid it
# recorded in STATE_DIR/kueue/pids). Idempotent. hack/cluster/down.sh calls it first,
# while the API server still answers.
#
#   hack/kueue/down.sh STATE_DIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/cluster/lib.sh
source "$here/../cluster/lib.sh"
state="$(cluster_state_dir "${1:?usage: hack/kueue/down.sh STATE_DIR}")"
[[ -d "$state/kueue" ]] || exit 0
cluster_stop_pids "$state/kueue"
