#!/usr/bin/env bash
# Stop what hack/node/up.sh started and remove what it made, then the control plane
# (hack/cluster/down.sh). `make cluster-down` runs it. Idempotent; a state dir
# without a node is handed to hack/cluster/down.sh alone.
#
#   hack/node/down.sh [STATE_DIR]        (default: <repo>/.cluster)
#
# Order: pods first (cordon, delete them all, let the kubelet stop their containers
# and tear their network down), then the kubelet, kube-proxy, CoreDNS, the scheduler
# and containerd (exactly the PIDs in STATE_DIR/node/pids), containers the kubelet
# could not stop, mounts under STATE_DIR, the pods' cgroups, iptables rules
# (KUBE-*/CNI-* chains) and kube-router's ipsets, the control plane, the bridge. Ends by listing anything left
# behind (and fails if something is).
set -euo pipefail
# shellcheck source=hack/node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

state="$(cluster_state_dir "${1:-}")"
node="$state/node"
if [[ ! -d "$node" ]]; then
  exec "$node_repo_root/hack/cluster/down.sh" "$state"
fi
cluster_check_deletable "$state"
bridge="$(cat "$node/bridge" 2>/dev/null || echo "$NODE_BRIDGE")"
NODE_BRIDGE="$bridge"

kubectl_bin="$node/bin/kubectl"
if [[ -x "$kubectl_bin" && -f "$node/pids" ]] && cluster_all_alive "$state"; then
  k() { timeout 30 "$kubectl_bin" --kubeconfig "$state/kubeconfig" "$@"; }
  # No new pods land here; every pod goes, so the kubelet stops its containers and
  # releases its sandbox (network namespace, address) the way it would on a real node.
  k cordon --all >/dev/null 2>&1 || true
  k delete pods --all-namespaces --all --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
  deadline=$((SECONDS + 60))
  while [[ $SECONDS -lt $deadline ]]; do
    # Stopped sandboxes have had their network torn down (CNI DEL); the kubelet removes
    # them later, the ctr calls below now.
    running=0
    for nd in $(node_dirs "$state"); do
      running=$((running + $(node_ctr "$nd" tasks ls 2>/dev/null | awk 'NR > 1 && $3 == "RUNNING"' | wc -l)))
    done
    [[ "$running" == 0 ]] && break
    # Controllers recreate pods; with the node cordoned they stay Pending.
    k delete pods --all-namespaces --all --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
    sleep 1
  done
fi

# Per node: stop the kubelet first (it would restart containers), the rest after; nodes
# 2.. last, and the cluster's own services (node 1's pids: scheduler, CoreDNS) with node 1.
stop_node() { # NODE_DIR
  local nd="$1" pid
  if [[ -f "$nd/pids" ]]; then
    grep -E '^kubelet ' "$nd/pids" >"$nd/pids.kubelet" || true
    grep -vE '^kubelet ' "$nd/pids" >"$nd/pids.rest" || true
    mkdir -p "$nd/stop-kubelet" "$nd/stop-rest"
    mv "$nd/pids.kubelet" "$nd/stop-kubelet/pids"
    # Containers the kubelet left: killed through containerd while it still runs.
    cluster_stop_pids "$nd/stop-kubelet"
    if node_ctr "$nd" version >/dev/null 2>&1; then
      for id in $(node_ctr "$nd" tasks ls -q 2>/dev/null); do
        node_ctr "$nd" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
      done
      sleep 1
      for id in $(node_ctr "$nd" tasks ls -q 2>/dev/null); do
        node_ctr "$nd" tasks delete -f "$id" >/dev/null 2>&1 || true
      done
      for id in $(node_ctr "$nd" containers ls -q 2>/dev/null); do
        node_ctr "$nd" containers delete "$id" >/dev/null 2>&1 || true
      done
    fi
    mv "$nd/pids.rest" "$nd/stop-rest/pids"
    cluster_stop_pids "$nd/stop-rest"
    rm -f "$nd/pids"
  fi
  # Shims of this containerd outlive it by design; so may their processes.
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $nd/" || true); do
    pkill -KILL -P "$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
  done
}
for nd in $(node_dirs "$state" | sort -r); do
  stop_node "$nd"
done

# kube-proxy's, kube-router's and the kubelet's iptables chains, any CNI ones, then
# kube-router's ipsets (free once no rule refers to them). Nodes 2.. keep theirs in their
# network namespaces, which go below.
node_flush_iptables
node_destroy_ipsets

# Mounts under the state dir (sandbox /dev/shm, network namespaces, volumes,
# container root filesystems), deepest first.
while read -r target; do
  umount -l "$target" 2>/dev/null || true
done < <(awk -v s="$state/" 'index($2, s) == 1 {print $2}' /proc/self/mounts | sort -r)

# The pods' cgroups (deepest first; empty once their processes are gone).
cgroup_roots=(rolloutfleet-node)
for nd in $(node_dirs "$state"); do
  [[ -f "$nd/cgroup-root" ]] && cgroup_roots+=("$(sed 's:^/::' "$nd/cgroup-root")")
done
for hier in /sys/fs/cgroup/*/; do
  for root in $(printf '%s\n' "${cgroup_roots[@]}" | sort -u); do
    [[ -d "$hier/$root" ]] || continue
    find "$hier/$root" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
done

# Nodes 2..: their network namespaces (their bridges, iptables rules and ipsets go with
# them) and the host's end of their veth pairs and routes.
for nd in $(node_dirs "$state"); do
  [[ -f "$nd/netns" ]] || continue
  ns="$(cat "$nd/netns")"
  k="${nd##*/node-}"
  ip link delete "rfveth$k" 2>/dev/null || true
  ip netns delete "$ns" 2>/dev/null || true
done

while read -r path; do
  case " ${NODE_FIXED_PATHS[*]} " in *" $path "*) rm -rf "$path" ;; esac
done < <(cat "$node/created-paths" 2>/dev/null)

"$node_repo_root/hack/cluster/down.sh" "$state"

if ip link show "$bridge" >/dev/null 2>&1; then
  ip link set "$bridge" down 2>/dev/null || true
  ip link delete "$bridge" 2>/dev/null || true
fi

left="$(node_leftovers "$state")"
for hier in /sys/fs/cgroup/*/; do
  for root in $(printf '%s\n' "${cgroup_roots[@]}" | sort -u); do
    [[ -d "$hier/$root" ]] && left+=$'\n'"cgroup: $hier/$root"
  done
done
left="$(sed '/^$/d' <<<"$left")"
if [[ -n "$left" ]]; then
  printf '%s\n' "$left" >&2
  die "cluster-down left the above behind"
fi
log "down: the node(s), their containers, mounts, cgroups, bridge $bridge, network namespaces and iptables rules removed"
