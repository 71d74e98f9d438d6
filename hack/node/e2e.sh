#!/usr/bin/env bash
# `make e2e-node`: a real node of its own (hack/node/up.sh STATE_DIR), the command
# given (the tests of tests/node) against it, then hack/node/down.sh, whatever the
# tests did: nothing is left behind, and down.sh fails if something is.
#
#   hack/node/e2e.sh STATE_DIR COMMAND...
#
# The command gets ROLLOUTFLEET_NODE_STATE=STATE_DIR (its `env` file says the rest).
set -euo pipefail
# shellcheck source=hack/node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
state="$(cluster_state_dir "${1:?usage: e2e.sh STATE_DIR COMMAND...}")"
shift
t0=$SECONDS
rc=0
"$node_here/up.sh" "$state" || rc=$?
if [[ $rc -eq 0 ]]; then
  log "node up in $((SECONDS - t0)) s; running: $*"
  t1=$SECONDS
  ROLLOUTFLEET_NODE_STATE="$state" "$@" || rc=$?
  log "tests finished in $((SECONDS - t1)) s (exit $rc)"
fi
"$node_here/down.sh" "$state" || { log "cluster-down failed"; [[ $rc -ne 0 ]] || rc=1; }
log "e2e-node: exit $rc after $((SECONDS - t0)) s"
exit "$rc"
