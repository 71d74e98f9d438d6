# Shared settings and helpers of hack/node/up.sh and down.sh (sourced, not executed).
# shellcheck shell=bash

node_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
node_repo_root="$(cd "$node_here/../.." && pwd)"
# shellcheck source=hack/cluster/lib.sh
source "$node_repo_root/hack/cluster/lib.sh"

# The node's network: one Linux bridge that pods hang off (CNI bridge plugin), whose
# own address is the node's address. The API server, the kubelet and CoreDNS listen
# there, so pods reach them; nothing is routed off the machine.
NODE_BRIDGE="${NODE_BRIDGE:-rfnode0}"
NODE_POD_CIDR="${NODE_POD_CIDR:-10.244.0.0/24}"
NODE_IP="${NODE_IP:-10.244.0.1}"
NODE_NAME="${NODE_NAME:-rolloutfleet-node}"
# The Service range of hack/cluster/up.sh (10.0.0.0/24): .1 is `kubernetes`, .10 DNS.
NODE_DNS_SERVICE_IP=10.0.0.10
NODE_SERVICE_CIDR=10.0.0.0/24
# Every node's pod CIDR is in here: node K has 10.244.(K-1).0/24.
NODE_CLUSTER_CIDR=10.244.0.0/16
NODE_CLUSTER_DOMAIN=cluster.local

log() { printf '[node] %s\n' "$*" >&2; }
die() { printf '[node] ERROR: %s\n' "$*" >&2; exit 1; }

# step NAME LOG COMMAND...: run a step with its output in LOG; on failure one line
# says which step failed and where its log is (the tail follows), then exit.
step() {
  local name="$1" logf="$2" rc=0; shift 2
  "$@" >"$logf" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    tail -n 20 "$logf" >&2
    die "step '$name' failed (exit $rc); log: $logf"
  fi
}

node_ctr() { # NODE_DIR ARGS...: ctr against that node's containerd
  ctr --address "$1/containerd/containerd.sock" --namespace k8s.io "${@:2}"
}

# The state dirs of every node of STATE_DIR: node/ (node 1), then node-2/, node-3/, ...
node_dirs() {
  local d
  [[ -d "$1/node" ]] && echo "$1/node"
  for d in "$1"/node-[0-9]*; do [[ -d "$d" ]] && echo "$d"; done
  true
}

# Remove every iptables rule and chain that the kubelet, kube-proxy or CNI made:
# chains named KUBE-* or CNI-*, and the jumps to them from the built-in chains.
node_flush_iptables() {
  local cmd table rule chain
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null 2>&1 || continue
    for table in filter nat mangle raw; do
      "$cmd" -t "$table" -S >/dev/null 2>&1 || continue
      while read -r rule; do
        # iptables -S quotes what needs quoting (comments): eval keeps those words whole.
        eval "$cmd -t $table ${rule/#-A/-D}" 2>/dev/null || true
      done < <("$cmd" -t "$table" -S | grep -E '^-A ' | grep -E -- '-j (KUBE|CNI)-' | grep -vE '^-A (KUBE|CNI)-')
      while read -r chain; do
        "$cmd" -t "$table" -F "$chain" 2>/dev/null || true
      done < <("$cmd" -t "$table" -S | awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ {print $2}')
      while read -r chain; do
        "$cmd" -t "$table" -X "$chain" 2>/dev/null || true
      done < <("$cmd" -t "$table" -S | awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ {print $2}')
    done
  done
}

# kube-router's NetworkPolicy controller keeps pod and namespace sets as ipsets named KUBE-*.
node_ipsets() {
  command -v ipset >/dev/null 2>&1 || return 0
  ipset list -n 2>/dev/null | grep -E '^(inet6:)?KUBE-' || true
}
node_destroy_ipsets() {
  local set
  for set in $(node_ipsets); do ipset destroy "$set" 2>/dev/null || true; done
}

# Paths the kubelet and containerd create whatever they are told (the device-plugin
# socket dir, shim sockets, the CNI result cache). up.sh records which of them did not
# exist before it ran (STATE_DIR/node/created-paths); down.sh removes exactly those.
NODE_FIXED_PATHS=(/var/lib/kubelet /run/containerd /var/lib/cni)

# What a node of STATE_DIR could leave behind, one line each; empty when clean.
node_leftovers() {
  local state="$1" cmd table
  pgrep -af "$state/" | grep -v -E "pgrep|leftovers" | sed 's/^/process: /' || true
  pgrep -af "containerd-shim.*$state" | sed 's/^/shim: /' || true
  awk -v s="$state/" 'index($2, s) == 1 {print "mount: " $2}' /proc/self/mounts
  ip link show "$NODE_BRIDGE" >/dev/null 2>&1 && echo "bridge: $NODE_BRIDGE"
  ip netns list 2>/dev/null | awk '$1 ~ /^rolloutfleet-node-/ {print "network namespace: " $1}'
  ip -o link show 2>/dev/null | awk -F': ' '$2 ~ /^rfveth[0-9]+@/ {print "veth: " $2}'
  ip -o link show type veth 2>/dev/null | grep -F "master $NODE_BRIDGE" | sed 's/^/veth: /'
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null 2>&1 || continue
    for table in filter nat mangle raw; do
      "$cmd" -t "$table" -S 2>/dev/null | grep -E '(KUBE|CNI)-' | sed "s/^/$cmd -t $table: /"
    done
  done
  node_ipsets | sed 's/^/ipset: /'
  true
}
