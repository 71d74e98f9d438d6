#!/usr/bin/env bash
# Cut node K (2 and up, from `make cluster-up NODE=real NODES=2`) off the network, or put
# it back, as when a machine's link fails:
#
#   hack/node/cut.sh K [STATE_DIR]              (default STATE_DIR: <repo>/.cluster)
#   hack/node/cut.sh --restore K [STATE_DIR]
#
# Cutting sets the host's end of the node's veth pair down. Its kubelet stops reporting
# (the node turns NotReady after the controller-manager's grace period, 20 s here), its
# pods reach nothing (Redis, the API server, the other nodes) and nothing reaches them.
# Its processes and containers keep running, cut off. --restore sets the link up and
# routes the node's pod CIDR to it again.
set -euo pipefail
# shellcheck source=hack/node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

restore=0
if [[ "${1:-}" == "--restore" ]]; then restore=1; shift; fi
k="${1:-}"
[[ "$k" =~ ^[2-9]$ ]] || die "usage: cut.sh [--restore] K [STATE_DIR], K a node number from 2 (node 1 holds the control plane)"
state="$(cluster_state_dir "${2:-}")"
[[ -f "$state/node-$k/netns" ]] || die "no node $k in $state (started with NODES=$k or more?)"
link="rfveth$k"
ip link show "$link" >/dev/null 2>&1 || die "node $k's link $link is not there"
if ((restore)); then
  ip link set "$link" up
  ip route replace "10.244.$((k - 1)).0/24" via "10.243.$k.2" dev "$link"
  log "node $k ($link) is back on the network"
else
  ip link set "$link" down
  log "node $k ($link) is cut off: its kubelet stops reporting, its pods reach nothing"
fi
