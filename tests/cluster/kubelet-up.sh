#!/usr/bin/env bash
# Start the test kubelet (tests/cluster/kubelet.py) in the background for the control
# plane of hack/cluster/up.sh STATE_DIR; `make cluster-up` runs both.
#
#   tests/cluster/kubelet-up.sh [STATE_DIR]      (default: <repo>/.cluster)
#
# Writes STATE_DIR/kubelet.pid, logs to STATE_DIR/logs/kubelet.log, keeps pod logs in
# STATE_DIR/kubelet/. Waits until the Node is registered. Idempotent: a live kubelet of
# STATE_DIR is left alone. The kubelet stops by itself when STATE_DIR/pids goes away
# (hack/cluster/down.sh), killing its pods' processes; kubelet-down.sh stops it first.
#
# Env: KUBELET_NODE_NAME (rolloutfleet-test-node), KUBELET_GPUS (0),
#      KUBELET_ARGS (more flags, e.g. "--sleeper --cpu 16"), PYTHON (default: .venv's).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
state="${1:-$repo/.cluster}"
case "$state" in /*) ;; *) state="$PWD/$state" ;; esac
state="${state%/}"

log() { printf '[kubelet] %s\n' "$*" >&2; }
die() { printf '[kubelet] ERROR: %s\n' "$*" >&2; exit 1; }

[[ -f "$state/kubeconfig" && -f "$state/pids" ]] || die "no control plane in $state (run hack/cluster/up.sh $state)"
python="${PYTHON:-$repo/.venv/bin/python}"
[[ -x "$python" ]] || die "$python not found (make install)"
node="${KUBELET_NODE_NAME:-rolloutfleet-test-node}"

# shellcheck source=tests/cluster/kubelet-lib.sh
source "$here/kubelet-lib.sh"
if kubelet_alive "$state"; then
  log "already running: pid $(cat "$state/kubelet.pid")"
  exit 0
fi
rm -f "$state/kubelet.pid"
mkdir -p "$state/logs" "$state/kubelet"

# shellcheck disable=SC2086  # KUBELET_ARGS is a list of flags
(cd "$repo" && exec setsid "$python" -m tests.cluster.kubelet \
  --kubeconfig "$state/kubeconfig" --node-name "$node" --gpus "${KUBELET_GPUS:-0}" \
  --work-dir "$state/kubelet" --pid-file "$state/kubelet.pid" --exit-when-missing "$state/pids" \
  ${KUBELET_ARGS:-} </dev/null >>"$state/logs/kubelet.log" 2>&1) &

# shellcheck disable=SC1091
source "$state/env"
for _ in $(seq 150); do
  if curl -fsS --max-time 2 --cacert "$KUBE_CA_FILE" -H "Authorization: Bearer $KUBE_ADMIN_TOKEN" \
      "$KUBE_APISERVER_URL/api/v1/nodes/$node" 2>/dev/null | grep -q '"type": "Ready"'; then
    log "node $node ready (pid $(cat "$state/kubelet.pid"); log: $state/logs/kubelet.log)"
    exit 0
  fi
  kill -0 $! 2>/dev/null || { tail -n 30 "$state/logs/kubelet.log" >&2; die "the kubelet exited"; }
  sleep 0.2
done
tail -n 30 "$state/logs/kubelet.log" >&2
die "node $node not registered within 30 s"
