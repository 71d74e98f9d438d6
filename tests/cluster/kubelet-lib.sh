# Shared by kubelet-up.sh / kubelet-down.sh (sourced, not executed).
# shellcheck shell=bash

# True if STATE_DIR/kubelet.pid names a live test kubelet (guards against pid reuse).
kubelet_alive() {
  local pid
  pid="$(cat "$1/kubelet.pid" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null \
    && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- '-m tests.cluster.kubelet '
}
