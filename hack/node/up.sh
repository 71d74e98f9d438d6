#!/usr/bin/env bash
# Start the control plane of hack/cluster plus a REAL node: kubelet, kube-scheduler,
# kube-proxy (iptables) and CoreDNS built from the pinned Go modules
# (hack/cluster/build.sh node), kube-router's NetworkPolicy controller (hack/netpol/build.sh:
# the node's pods get the policies they are given), containerd + runc + CNI plugins from Debian, and our
# images (make images) loaded into containerd. `make cluster-up NODE=real` runs it.
#
#   [NODES=2] hack/node/up.sh [STATE_DIR]        (default: <repo>/.cluster)
#
# Node 1's network is one bridge ($NODE_BRIDGE, $NODE_IP/24) made here: the API
# server, its kubelet and CoreDNS listen on its address, its pods get addresses behind it,
# nothing is routed off the machine. NODES=N (default 1, at most 4) adds nodes 2..N, each
# in a network namespace of its own (rolloutfleet-node-K) with its own bridge, pod CIDR
# 10.244.(K-1).0/24 and address 10.244.(K-1).1, its own containerd, kubelet, kube-proxy and
# kube-router, joined to the host by a veth pair (10.243.K.1 <-> 10.243.K.2) and a route:
# pods and Services of every node reach each other. Writes STATE_DIR/node/ (node 1) and
# STATE_DIR/node-K/: pids, logs/, configs, PKI, containerd's state. containerd's image
# stores live in the cache (${ROLLOUTFLEET_CACHE:-~/.cache/rolloutfleet}/node/containerd,
# .../containerd-K) so images load once.
# hack/node/down.sh stops all of it and removes what it made (processes, mounts,
# bridges, network namespaces, iptables rules, ipsets, cgroups).
#
# Every step logs to STATE_DIR/node*/logs/; a failed step stops with one line naming
# it and its log. Env: NODE_UP_TIMEOUT (seconds to wait for each part, default 120),
# NODE_IMAGES (images node 1 loads, default: the ones `make images` builds),
# NODE_EXTRA_IMAGES (what nodes 2.. load, default: all but the CUDA worker).
set -euo pipefail
# shellcheck source=hack/node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

state="$(cluster_state_dir "${1:-}")"
node="$state/node"
timeout_s="${NODE_UP_TIMEOUT:-120}"
cache="${ROLLOUTFLEET_CACHE:-$HOME/.cache/rolloutfleet}"
# The tags `make images` gives (the chart's appVersion), read the way it reads them.
version="$(source "$node_repo_root/hack/images/lib.sh" && images_version)" || die "no image version (see above)"
nodes="${NODES:-1}"
[[ "$nodes" =~ ^[1-4]$ ]] || die "NODES must be 1 to 4, got '$nodes'"
# Nodes 2.. hold the slim worker, the operator and Redis (not the CUDA worker: 6 GB more
# in each node's store); a pod there that needs another image does not start.
extra_images="${NODE_EXTRA_IMAGES:-ghcr.io/rolloutfleet/worker:$version-slim ghcr.io/rolloutfleet/operator:$version ghcr.io/rolloutfleet/redis:$version}"
images="${NODE_IMAGES:-ghcr.io/rolloutfleet/worker:$version-slim ghcr.io/rolloutfleet/worker:$version ghcr.io/rolloutfleet/operator:$version ghcr.io/rolloutfleet/redis:$version}"

[[ "$(id -u)" == 0 ]] || die "a real node needs root (containers, bridges, iptables)"
cni_bin=/usr/lib/cni
# What the node runs comes from Debian's packages: installed here when missing (a new
# machine), one line naming the step and its log when that fails.
declare -A package_of=([containerd]=containerd [ctr]=containerd [runc]=runc [iptables]=iptables [ip]=iproute2
  [ipset]=ipset [podman]=podman [openssl]=openssl [curl]=curl [cc]=gcc [setsid]=util-linux [nsenter]=util-linux)
missing=()
for tool in "${!package_of[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${package_of[$tool]}")
done
for plugin in bridge host-local loopback; do
  [[ -x "$cni_bin/$plugin" ]] || missing+=(containernetworking-plugins)
done
# pause is linked statically: libc.a
[[ -f /usr/lib/x86_64-linux-gnu/libc.a ]] || missing+=(libc6-dev)
if ((${#missing[@]})); then
  command -v apt-get >/dev/null 2>&1 || die "missing Debian packages ${missing[*]} and no apt-get to install them"
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  apt_log="$(mktemp /tmp/rolloutfleet-node-apt.XXXXXX.log)"
  log "installing ${missing[*]} (Debian packages); log: $apt_log"
  step "apt-get install ${missing[*]}" "$apt_log" env DEBIAN_FRONTEND=noninteractive \
    bash -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"' apt-get "${missing[@]}"
fi

# --- already up? -------------------------------------------------------------------
node_dir_of() { # K: node K's state dir
  if (($1 == 1)); then echo "$node"; else echo "$state/node-$1"; fi
}
node_name_of() { # K
  if (($1 == 1)); then echo "$NODE_NAME"; else echo "$NODE_NAME-$1"; fi
}
node_up() {
  local k nd name pid
  for ((k = 1; k <= nodes; k++)); do
    nd="$(node_dir_of "$k")"
    [[ -f "$nd/pids" ]] || return 1
    while read -r name pid; do cluster_pid_is "$pid" "$name" || return 1; done <"$nd/pids"
    KUBECONFIG="$state/kubeconfig" "$node/bin/kubectl" get node "$(node_name_of "$k")" \
      -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True || return 1
  done
  # No more nodes than asked for.
  [[ ! -d "$state/node-$((nodes + 1))" ]]
}
if [[ -x "$node/bin/kubectl" ]] && cluster_all_alive "$state" && node_up; then
  log "already up: $nodes node(s) ($state)"
  exit 0
fi
if [[ -e "$state" ]]; then
  log "stopping what is left of a previous cluster in $state"
  "$node_here/down.sh" "$state"
fi

t_start=$SECONDS
bootlog="$(mktemp -d)"
trap 'rm -rf "$bootlog"' EXIT

# --- binaries ------------------------------------------------------------------------
log "building (or finding) the node's binaries; log: $bootlog/build-node.log"
step "build node binaries" "$bootlog/build-node.log" "$node_repo_root/hack/cluster/build.sh" node
bindir="$(tail -n1 "$bootlog/build-node.log")"
step "build control-plane binaries" "$bootlog/build-cp.log" "$node_repo_root/hack/cluster/build.sh" control-plane
step "build Kueue" "$bootlog/build-kueue.log" "$node_repo_root/hack/kueue/build.sh"
step "build kube-router" "$bootlog/build-netpol.log" "$node_repo_root/hack/netpol/build.sh"
netpol_bin="$(tail -n1 "$bootlog/build-netpol.log")/bin/kube-router"
tools_dir="$("$node_repo_root/hack/cluster/get-tools.sh" 2>"$bootlog/tools.log" | tail -n1)" \
  || die "step 'kubectl and helm' failed; log: $bootlog/tools.log"

# --- network: the bridge the API server binds to ----------------------------------------
if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
  ip link add "$NODE_BRIDGE" type bridge || die "cannot create bridge $NODE_BRIDGE"
fi
ip addr replace "$NODE_IP/${NODE_POD_CIDR#*/}" dev "$NODE_BRIDGE"
ip link set "$NODE_BRIDGE" up
# Pod-to-Service traffic between pods of one bridge must pass iptables (kube-proxy's
# DNAT); the kernel here has br_netfilter built in.
sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.ipv4.ip_forward=1 \
  || die "cannot set net.bridge.bridge-nf-call-iptables / net.ipv4.ip_forward"

# --- control plane, listening on the node's address -------------------------------------
CLUSTER_ADVERTISE_ADDRESS="$NODE_IP" CLUSTER_BIN_DIR="$(cd "$bindir" && pwd)" \
  "$node_repo_root/hack/cluster/up.sh" "$state"
mkdir -p "$node/logs" "$node/pki" "$node/bin"
for path in "${NODE_FIXED_PATHS[@]}"; do
  [[ -e "$path" ]] || echo "$path" >>"$node/created-paths"
done
echo "$NODE_BRIDGE" >"$node/bridge"
ln -sf "$tools_dir/kubectl" "$node/bin/kubectl"
ln -sf "$tools_dir/helm" "$node/bin/helm"
kubectl() { "$tools_dir/kubectl" --kubeconfig "$state/kubeconfig" "$@"; }

# nd: the state dir of the node being brought up (node 1's: $node). The helpers below
# read it, and start() runs a process in that node's network namespace (in_ns).
nd="$node"
in_ns=()
fail() {
  printf '[node] ERROR: %s\n' "$*" >&2
  cluster_tail_logs "$nd" 15
  log "logs stay in $nd/logs until make cluster-down"
  exit 1
}

# --- PKI: client certificates for the node's components, the kubelet's serving cert -----
pki="$state/pki"
mint() { # name subject ext-usage [SAN]: into $nd/pki
  local name="$1" subj="$2" usage="$3" san="${4:-}"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$nd/pki/$name.key" -out "$nd/pki/$name.csr" \
    -subj "$subj" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n "$san" ]] && echo "subjectAltName=$san"
  } >"$nd/pki/$name.ext"
  openssl x509 -req -in "$nd/pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$nd/pki/$name.ext" -out "$nd/pki/$name.crt" 2>/dev/null
}
(
  umask 077
  mint kube-scheduler "/CN=system:kube-scheduler" clientAuth
  mint coredns "/CN=rolloutfleet:coredns" clientAuth
) || die "minting the cluster's certificates with openssl failed"
server="https://$NODE_IP:$(cat "$state/apiserver.port")"
kubeconfig_for() { # component: $nd/<component>.kubeconfig with $nd/pki/<component>.crt
  # umask in a subshell only: processes started later inherit this shell's umask, and
  # containerd makes its snapshot dirs (every container's /) with it.
  ( umask 077 && cat >"$nd/$1.kubeconfig" ) <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$server", certificate-authority: "$pki/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$nd/pki/$1.crt", client-key: "$nd/pki/$1.key"}
contexts:
- name: $1
  context: {cluster: local, user: $1}
current-context: $1
EOF
}
for c in kube-scheduler coredns; do kubeconfig_for "$c"; done

free_ports() { # N: N free TCP ports on the host
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
}
read -r sched_port dns_health dns_ready < <(free_ports 3)

# --- processes -----------------------------------------------------------------------------
umask 022  # what the node's processes create (container root filesystems, volumes) is world-readable
: >"$node/pids"
start() { # name binary args...: in node $nd's network namespace
  cluster_start "$nd" "$1" "${in_ns[@]}" "${@:2}" || fail "$1 did not start"
}
wait_for() { # what command...
  local what="$1" t0=$SECONDS name pid; shift
  until "$@" >/dev/null 2>&1; do
    while read -r name pid; do
      cluster_pid_is "$pid" "$name" || fail "$name (pid $pid) exited while waiting for $what; log: $nd/logs/$name.log"
    done <"$nd/pids"
    (( SECONDS - t0 < timeout_s )) || fail "timed out after ${timeout_s}s waiting for $what"
    sleep 0.5
  done
}

# The cluster's own services, on node 1: the scheduler, CoreDNS.
cat >"$node/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$node/kube-scheduler.kubeconfig"}
leaderElection: {leaderElect: false}
EOF
start kube-scheduler "$bindir/kube-scheduler" --config="$node/kube-scheduler.yaml" \
  --authentication-kubeconfig="$node/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig="$node/kube-scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$sched_port" --v=1

# CoreDNS reads Services and EndpointSlices as its own user, with what upstream's
# system:coredns role grants. kube-router (each node's) reads pods, namespaces and policies.
kubectl apply -f - >"$node/logs/cluster-rbac.log" 2>&1 <<EOF || fail "creating CoreDNS's and kube-router's RBAC failed"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "rolloutfleet:coredns"}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "rolloutfleet:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "rolloutfleet:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "rolloutfleet:coredns"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "rolloutfleet:kube-router"}
rules:
- {apiGroups: [""], resources: [namespaces, pods, services, nodes, endpoints], verbs: [get, list, watch]}
- {apiGroups: [networking.k8s.io], resources: [networkpolicies], verbs: [get, list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "rolloutfleet:kube-router"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "rolloutfleet:kube-router"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "rolloutfleet:kube-router"}
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  clusterIP: $NODE_DNS_SERVICE_IP
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
# CoreDNS runs on node 1 itself, not in a pod: its endpoint is that node's address.
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-node
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: rolloutfleet.io-node}
addressType: IPv4
endpoints:
- addresses: ["$NODE_IP"]
  conditions: {ready: true}
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
EOF
cat >"$node/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    errors
    health 127.0.0.1:$dns_health
    ready 127.0.0.1:$dns_ready
    kubernetes $NODE_CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $node/coredns.kubeconfig coredns
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
EOF
start coredns "$bindir/coredns" -conf "$node/Corefile"
wait_for "CoreDNS /ready" curl -fsS --max-time 2 "http://127.0.0.1:$dns_ready/ready"

# --- a node: containerd, images, kube-proxy, the kubelet, kube-router --------------------
sandbox_image="localhost/rolloutfleet/pause:$(basename "$(dirname "$bindir")" | cut -d- -f1)"
# The pause binary as the sandbox image (built once, loaded into every node).
pause_ctx="$node/pause-image"
mkdir -p "$pause_ctx"
cp "$bindir/pause" "$pause_ctx/pause"
printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$pause_ctx/Dockerfile"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$node_repo_root/hack/images/containers.conf}"  # podman here
step "build the pause image" "$node/logs/pause-image.log" podman build -q -t "$sandbox_image" "$pause_ctx"

# Images: the sandbox image, then what `make images` built, each imported only when the
# node's containerd does not hold that exact image yet.
load_image() { # ref
  local ref="$1" want have digest archive
  want="$(podman image inspect --format '{{.Id}}' "$ref" 2>/dev/null)" \
    || { log "image $ref not built (make images): pods that use it will not start"; return 0; }
  digest="$(node_ctr "$nd" images ls "name==$ref" 2>/dev/null | awk 'NR == 2 {print $3}')"
  have=""
  if [[ -n "$digest" ]]; then
    have="$(node_ctr "$nd" content get "$digest" 2>/dev/null \
      | python3 -c 'import json, sys; print(json.load(sys.stdin)["config"]["digest"].split(":")[1])' 2>/dev/null || true)"
  fi
  if [[ "$have" == "$want" ]]; then
    log "image $ref already in $node_name's containerd"
    return 0
  fi
  local t0=$SECONDS
  if [[ "$ref" == "$sandbox_image" ]]; then
    archive="$node/pause-image/pause.oci.tar"
    [[ -f "$archive" ]] || step "save $ref" "$nd/logs/image-save.log" podman save --format oci-archive -o "$archive" "$ref"
  else
    # hack/images/export.sh keeps one archive per image ID in the cache (saved once).
    archive="$(ROLLOUTFLEET_ENGINE=podman "$node_repo_root/hack/images/export.sh" "$ref" 2>"$nd/logs/image-export.log" | tail -n1)" \
      || { tail -n 5 "$nd/logs/image-export.log" >&2; die "step 'export $ref' failed; log: $nd/logs/image-export.log"; }
  fi
  # An import can fail once with "parent snapshot ... does not exist" after the store's
  # garbage collector dropped an older build's snapshots (seen 2026-12-06); a second import
  # of the same archive unpacks again and succeeds.
  if ! node_ctr "$nd" images import "$archive" >"$nd/logs/image-import.log" 2>&1; then
    log "importing $ref failed ($(tail -c 200 "$nd/logs/image-import.log" | tr '\n' ' ')); trying once more"
    step "import $ref into containerd" "$nd/logs/image-import.log" node_ctr "$nd" images import "$archive"
  fi
  log "image $ref loaded into $node_name in $((SECONDS - t0)) s"
}

# The image store lives in the cache across runs, and the CRI plugin keeps a second record
# of every image it saw, named by its config digest (sha256:...): after each rebuild, the
# old build stayed behind under that name (its layers and unpacked snapshots, ~6 GB for the
# CUDA worker), and a few rebuilds filled the disk. Keep what this node loads (by name and
# by config digest); remove the rest, which lets containerd's garbage collector drop their
# content and snapshots.
prune_images() {
  local keep=" " ref digest config removed=0
  for ref in "$sandbox_image" $node_images; do
    keep+="$ref "
    digest="$(node_ctr "$nd" images ls "name==$ref" 2>/dev/null | awk 'NR == 2 {print $3}')"
    [[ -n "$digest" ]] || continue
    config="$(node_ctr "$nd" content get "$digest" 2>/dev/null \
      | python3 -c 'import json, sys; print(json.load(sys.stdin)["config"]["digest"])' 2>/dev/null || true)"
    [[ -n "$config" ]] && keep+="$config "
  done
  while read -r ref; do
    [[ -n "$ref" && "$keep" != *" $ref "* ]] || continue
    node_ctr "$nd" images rm --sync "$ref" >/dev/null && removed=$((removed + 1))
  done < <(node_ctr "$nd" images ls -q 2>/dev/null)
  (( removed == 0 )) || log "removed $removed stale image record(s) from $node_name's containerd store (older builds)"
}

# Node K >= 2: its network namespace, the veth pair to the host, its bridge, the routes.
node_network() { # K netns bridge address cidr
  local k="$1" ns="$2" bridge="$3" address="$4" cidr="$5"
  local host_end="rfveth$k" host_ip="10.243.$k.1" ns_ip="10.243.$k.2"
  ip netns add "$ns" || die "cannot create network namespace $ns"
  ip link add "$host_end" type veth peer name eth0 netns "$ns" || die "cannot create veth $host_end"
  ip addr add "$host_ip/30" dev "$host_end"
  ip link set "$host_end" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$ns_ip/30" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "$host_ip"
  ip -n "$ns" link add "$bridge" type bridge
  ip -n "$ns" addr add "$address/${cidr#*/}" dev "$bridge"
  ip -n "$ns" link set "$bridge" up
  # The host routes the node's pod CIDR (its address included) to it; the node routes the
  # rest (the API server, node 1, other nodes) to the host.
  ip route replace "$cidr" via "$ns_ip" dev "$host_end"
  nsenter --net="/run/netns/$ns" sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 \
    || die "cannot set net.ipv4.ip_forward / net.bridge.bridge-nf-call-iptables in $ns"
}

bring_up_node() { # K
  local k="$1" kubelet_port kubelet_healthz proxy_healthz proxy_metrics netpol_health
  nd="$(node_dir_of "$k")"
  node_name="$(node_name_of "$k")"
  local address cidr bridge ctrd_root cgroup_root netns=""
  if ((k == 1)); then
    address="$NODE_IP" cidr="$NODE_POD_CIDR" bridge="$NODE_BRIDGE" ctrd_root="$cache/node/containerd"
    cgroup_root=/rolloutfleet-node
    in_ns=()
  else
    address="10.244.$((k - 1)).1" cidr="10.244.$((k - 1)).0/24" bridge="rfnode$((k - 1))"
    ctrd_root="$cache/node/containerd-$k" cgroup_root="/rolloutfleet-node-$k" netns="rolloutfleet-node-$k"
    mkdir -p "$nd/logs"
    : >"$nd/pids"
    echo "$netns" >"$nd/netns"
    node_network "$k" "$netns" "$bridge" "$address" "$cidr"
    in_ns=(nsenter --net="/run/netns/$netns")
  fi
  mkdir -p "$nd/logs" "$nd/pki" "$nd/cni/net.d" "$nd/cni/ipam" "$nd/kubelet" "$nd/pod-logs"
  echo "$cgroup_root" >"$nd/cgroup-root"
  (
    umask 077
    mint kubelet "/O=system:nodes/CN=system:node:$node_name" clientAuth
    mint kubelet-serving "/CN=$node_name" serverAuth "IP:$address,DNS:$node_name"
    mint kube-proxy "/CN=system:kube-proxy" clientAuth
    mint kube-router "/CN=rolloutfleet:kube-router" clientAuth
  ) || die "minting $node_name's certificates with openssl failed"
  for c in kubelet kube-proxy kube-router; do kubeconfig_for "$c"; done
  read -r kubelet_port kubelet_healthz proxy_healthz proxy_metrics netpol_health < <(free_ports 5)

  # containerd: its own socket and state under $nd, its image store in the cache.
  mkdir -p "$ctrd_root" "$nd/containerd"
  cat >"$nd/containerd.toml" <<EOF
version = 2
root = "$ctrd_root"
state = "$nd/containerd/state"
[grpc]
  address = "$nd/containerd/containerd.sock"
[ttrpc]
  address = "$nd/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$nd/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$sandbox_image"
  # A negative oom_score_adj is refused on these machines.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$nd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$nd/cni/net.d"
EOF
  cat >"$nd/cni/net.d/10-rolloutfleet.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "rolloutfleet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$nd/cni/ipam",
        "ranges": [[{"subnet": "$cidr", "rangeStart": "${address%.*}.10"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
  start containerd "$(command -v containerd)" --config "$nd/containerd.toml"
  wait_for "$node_name's containerd" node_ctr "$nd" version
  node_images="$images"
  ((k == 1)) || node_images="$extra_images"
  load_image "$sandbox_image"
  for ref in $node_images; do load_image "$ref"; done
  prune_images

  cat >"$nd/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$nd/kube-proxy.kubeconfig"}
hostnameOverride: $node_name
mode: iptables
clusterCIDR: $NODE_CLUSTER_CIDR
healthzBindAddress: 127.0.0.1:$proxy_healthz
metricsBindAddress: 127.0.0.1:$proxy_metrics
# Leave the host's conntrack table sizes and timeouts as they are.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
  start kube-proxy "$bindir/kube-proxy" --config="$nd/kube-proxy.yaml" --v=1

  cat >"$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $address
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz
tlsCertFile: $nd/pki/kubelet-serving.crt
tlsPrivateKeyFile: $nd/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$nd/containerd/containerd.sock
# These machines: cgroup v1 (hybrid), no systemd cgroup driver, swap allowed.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $cgroup_root
failSwapOn: false
clusterDNS: [$NODE_DNS_SERVICE_IP]
clusterDomain: $NODE_CLUSTER_DOMAIN
podCIDR: $cidr
podLogsDir: $nd/pod-logs
volumePluginDir: $nd/kubelet/volume-plugins
serializeImagePulls: false
# Images are loaded by hand (no registry): never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%}
EOF
  # The pods' cgroups live under $cgroup_root in every hierarchy (down.sh removes it).
  local hier
  for hier in /sys/fs/cgroup/*/; do
    [[ -d "$hier" && ! -L "${hier%/}" ]] || continue
    mkdir -p "$hier/${cgroup_root#/}" 2>/dev/null || true
  done
  start kubelet "$bindir/kubelet" --config="$nd/kubelet.yaml" --kubeconfig="$nd/kubelet.kubeconfig" \
    --root-dir="$nd/kubelet" --hostname-override="$node_name" --node-ip="$address" --v=1
  node_ready() {
    kubectl get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True
  }
  wait_for "node $node_name Ready" node_ready

  # NetworkPolicy, enforced: kube-router's firewall only (no routing, no service proxy: the
  # bridges, the routes and kube-proxy do those).
  start kube-router "$netpol_bin" --kubeconfig="$nd/kube-router.kubeconfig" --hostname-override="$node_name" \
    --run-firewall=true --run-router=false --run-service-proxy=false --enable-ipv6=false \
    --service-cluster-ip-range="$NODE_SERVICE_CIDR" --health-port="$netpol_health" --iptables-sync-period=1m --v=1
  wait_for "$node_name's kube-router (NetworkPolicy)" "${in_ns[@]}" curl -fsS --max-time 2 "http://127.0.0.1:$netpol_health/healthz"
}

for ((k = 1; k <= nodes; k++)); do
  bring_up_node "$k"
done
nd="$node"
in_ns=()
kubernetes_endpoint() {
  kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes \
    -o jsonpath='{.items[*].endpoints[*].addresses[*]}' | grep -qw "$NODE_IP"
}
wait_for "the kubernetes Service's endpoint" kubernetes_endpoint

cat >>"$state/env" <<EOF
NODES=$nodes
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
NODE_BRIDGE=$NODE_BRIDGE
NODE_STATE_DIR=$node
NODE_CONTAINERD_SOCKET=$node/containerd/containerd.sock
KUBECTL=$tools_dir/kubectl
HELM=$tools_dir/helm
EOF
for ((k = 2; k <= nodes; k++)); do
  cat >>"$state/env" <<EOF
NODE_${k}_NAME=$(node_name_of "$k")
NODE_${k}_IP=10.244.$((k - 1)).1
NODE_${k}_NETNS=rolloutfleet-node-$k
NODE_${k}_STATE_DIR=$(node_dir_of "$k")
NODE_${k}_CONTAINERD_SOCKET=$(node_dir_of "$k")/containerd/containerd.sock
EOF
done
log "up in $((SECONDS - t_start)) s: $nodes node(s) Ready, $NODE_NAME at $NODE_IP (kubeconfig: $state/kubeconfig)"
