#!/usr/bin/env bash
# Start the control plane of hack/cluster plus a REAL node: kubelet, kube-scheduler,
# kube-proxy (iptables) and CoreDNS built from the pinned Go modules
# (hack/cluster/build.sh node), containerd + runc + CNI plugins from Debian, and our
# images (make images) loaded into containerd. `make cluster-up NODE=real` runs it.
#
#   hack/node/up.sh [STATE_DIR]        (default: <repo>/.cluster)
#
# The node's network is one bridge ($NODE_BRIDGE, $NODE_IP/24) made here: the API
# server, the kubelet and CoreDNS listen on its address, pods get addresses behind it,
# nothing is routed off the machine. Writes STATE_DIR/node/: pids, logs/, configs, PKI,
# containerd's state. containerd's image store lives in the cache
# (${ROLLOUTFLEET_CACHE:-~/.cache/rolloutfleet}/node/containerd) so images load once.
# hack/node/down.sh stops all of it and removes what it made (processes, mounts,
# bridge, iptables rules, cgroups).
#
# Every step logs to STATE_DIR/node/logs/; a failed step stops with one line naming
# it and its log. Env: NODE_UP_TIMEOUT (seconds to wait for each part, default 120),
# NODE_IMAGES (images to load, default: the ones `make images` builds).
set -euo pipefail
# shellcheck source=hack/node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

state="$(cluster_state_dir "${1:-}")"
node="$state/node"
timeout_s="${NODE_UP_TIMEOUT:-120}"
cache="${ROLLOUTFLEET_CACHE:-$HOME/.cache/rolloutfleet}"
# The tags `make images` gives (the chart's appVersion), read the way it reads them.
version="$(source "$node_repo_root/hack/images/lib.sh" && images_version)" || die "no image version (see above)"
images="${NODE_IMAGES:-ghcr.io/rolloutfleet/worker:$version-slim ghcr.io/rolloutfleet/worker:$version ghcr.io/rolloutfleet/operator:$version ghcr.io/rolloutfleet/redis:$version}"

[[ "$(id -u)" == 0 ]] || die "a real node needs root (containers, bridges, iptables)"
cni_bin=/usr/lib/cni
# What the node runs comes from Debian's packages: installed here when missing (a new
# machine), one line naming the step and its log when that fails.
declare -A package_of=([containerd]=containerd [ctr]=containerd [runc]=runc [iptables]=iptables [ip]=iproute2
  [podman]=podman [openssl]=openssl [curl]=curl [cc]=gcc [setsid]=util-linux)
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
node_up() {
  [[ -f "$node/pids" ]] || return 1
  local name pid
  while read -r name pid; do cluster_pid_is "$pid" "$name" || return 1; done <"$node/pids"
  KUBECONFIG="$state/kubeconfig" "$node/bin/kubectl" get node "$NODE_NAME" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True
}
if [[ -x "$node/bin/kubectl" ]] && cluster_all_alive "$state" && node_up; then
  log "already up: node $NODE_NAME ($state)"
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
mkdir -p "$node/logs" "$node/pki" "$node/bin" "$node/cni/net.d" "$node/cni/ipam" "$node/kubelet" "$node/pod-logs"
for path in "${NODE_FIXED_PATHS[@]}"; do
  [[ -e "$path" ]] || echo "$path" >>"$node/created-paths"
done
echo "$NODE_BRIDGE" >"$node/bridge"
ln -sf "$tools_dir/kubectl" "$node/bin/kubectl"
ln -sf "$tools_dir/helm" "$node/bin/helm"
kubectl() { "$tools_dir/kubectl" --kubeconfig "$state/kubeconfig" "$@"; }

fail() {
  printf '[node] ERROR: %s\n' "$*" >&2
  cluster_tail_logs "$node" 15
  log "logs stay in $node/logs until make cluster-down"
  exit 1
}

# --- PKI: client certificates for the node's components, the kubelet's serving cert -----
pki="$state/pki"
mint() { # name subject ext-usage [SAN]
  local name="$1" subj="$2" usage="$3" san="${4:-}"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$node/pki/$name.key" -out "$node/pki/$name.csr" \
    -subj "$subj" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n "$san" ]] && echo "subjectAltName=$san"
  } >"$node/pki/$name.ext"
  openssl x509 -req -in "$node/pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$node/pki/$name.ext" -out "$node/pki/$name.crt" 2>/dev/null
}
(
  umask 077
  mint kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
  mint kubelet-serving "/CN=$NODE_NAME" serverAuth "IP:$NODE_IP,DNS:$NODE_NAME"
  mint kube-scheduler "/CN=system:kube-scheduler" clientAuth
  mint kube-proxy "/CN=system:kube-proxy" clientAuth
  mint coredns "/CN=rolloutfleet:coredns" clientAuth
) || die "minting the node's certificates with openssl failed"
server="https://$NODE_IP:$(cat "$state/apiserver.port")"
kubeconfig_for() { # component
  # umask in a subshell only: processes started later inherit this shell's umask, and
  # containerd makes its snapshot dirs (every container's /) with it.
  ( umask 077 && cat >"$node/$1.kubeconfig" ) <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$server", certificate-authority: "$pki/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$node/pki/$1.crt", client-key: "$node/pki/$1.key"}
contexts:
- name: $1
  context: {cluster: local, user: $1}
current-context: $1
EOF
}
for c in kubelet kube-scheduler kube-proxy coredns; do kubeconfig_for "$c"; done

read -r kubelet_port kubelet_healthz sched_port proxy_healthz proxy_metrics dns_health dns_ready < <(python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(7)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
)

# --- processes -----------------------------------------------------------------------------
umask 022  # what the node's processes create (container root filesystems, volumes) is world-readable
: >"$node/pids"
start() { # name binary args...
  cluster_start "$node" "$@" || fail "$1 did not start"
}
wait_for() { # what command...
  local what="$1" t0=$SECONDS name pid; shift
  until "$@" >/dev/null 2>&1; do
    while read -r name pid; do
      cluster_pid_is "$pid" "$name" || fail "$name (pid $pid) exited while waiting for $what; log: $node/logs/$name.log"
    done <"$node/pids"
    (( SECONDS - t0 < timeout_s )) || fail "timed out after ${timeout_s}s waiting for $what"
    sleep 0.5
  done
}

# containerd: its own socket and state under STATE_DIR/node, its image store in the cache.
ctrd_root="$cache/node/containerd"
mkdir -p "$ctrd_root" "$node/containerd"
sandbox_image="localhost/rolloutfleet/pause:$(basename "$(dirname "$bindir")" | cut -d- -f1)"
cat >"$node/containerd.toml" <<EOF
version = 2
root = "$ctrd_root"
state = "$node/containerd/state"
[grpc]
  address = "$node/containerd/containerd.sock"
[ttrpc]
  address = "$node/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$node/containerd/opt"
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
        Root = "$node/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$node/cni/net.d"
EOF
cat >"$node/cni/net.d/10-rolloutfleet.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "rolloutfleet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$NODE_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$node/cni/ipam",
        "ranges": [[{"subnet": "$NODE_POD_CIDR", "rangeStart": "${NODE_IP%.*}.10"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
start containerd "$(command -v containerd)" --config "$node/containerd.toml"
wait_for "containerd" node_ctr "$state" version

# Images: the pause binary as the sandbox image, then what `make images` built, each
# imported only when containerd does not hold that exact image yet.
pause_ctx="$node/pause-image"
mkdir -p "$pause_ctx"
cp "$bindir/pause" "$pause_ctx/pause"
printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$pause_ctx/Dockerfile"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$node_repo_root/hack/images/containers.conf}"  # podman here
step "build the pause image" "$node/logs/pause-image.log" podman build -q -t "$sandbox_image" "$pause_ctx"
load_image() { # ref
  local ref="$1" want have digest archive
  want="$(podman image inspect --format '{{.Id}}' "$ref" 2>/dev/null)" \
    || { log "image $ref not built (make images): pods that use it will not start"; return 0; }
  digest="$(node_ctr "$state" images ls "name==$ref" 2>/dev/null | awk 'NR == 2 {print $3}')"
  have=""
  if [[ -n "$digest" ]]; then
    have="$(node_ctr "$state" content get "$digest" 2>/dev/null \
      | python3 -c 'import json, sys; print(json.load(sys.stdin)["config"]["digest"].split(":")[1])' 2>/dev/null || true)"
  fi
  if [[ "$have" == "$want" ]]; then
    log "image $ref already in containerd"
    return 0
  fi
  local t0=$SECONDS
  if [[ "$ref" == "$sandbox_image" ]]; then
    archive="$node/pause-image/pause.oci.tar"
    step "save $ref" "$node/logs/image-save.log" podman save --format oci-archive -o "$archive" "$ref"
  else
    # hack/images/export.sh keeps one archive per image ID in the cache (saved once).
    archive="$(ROLLOUTFLEET_ENGINE=podman "$node_repo_root/hack/images/export.sh" "$ref" 2>"$node/logs/image-export.log" | tail -n1)" \
      || { tail -n 5 "$node/logs/image-export.log" >&2; die "step 'export $ref' failed; log: $node/logs/image-export.log"; }
  fi
  # An import can fail once with "parent snapshot ... does not exist" after the store's
  # garbage collector dropped an older build's snapshots (seen 2026-12-06); a second import
  # of the same archive unpacks again and succeeds.
  if ! node_ctr "$state" images import "$archive" >"$node/logs/image-import.log" 2>&1; then
    log "importing $ref failed ($(tail -c 200 "$node/logs/image-import.log" | tr '\n' ' ')); trying once more"
    step "import $ref into containerd" "$node/logs/image-import.log" node_ctr "$state" images import "$archive"
  fi
  log "image $ref loaded in $((SECONDS - t0)) s"
}
load_image "$sandbox_image"
for ref in $images; do load_image "$ref"; done

# The image store lives in the cache across runs, and the CRI plugin keeps a second record
# of every image it saw, named by its config digest (sha256:...): after each rebuild, the
# old build stayed behind under that name (its layers and unpacked snapshots, ~6 GB for the
# CUDA worker), and a few rebuilds filled the disk. Keep what this node loads (by name and
# by config digest); remove the rest, which lets containerd's garbage collector drop their
# content and snapshots.
prune_images() {
  local keep=" " ref digest config removed=0
  for ref in "$sandbox_image" $images; do
    keep+="$ref "
    digest="$(node_ctr "$state" images ls "name==$ref" 2>/dev/null | awk 'NR == 2 {print $3}')"
    [[ -n "$digest" ]] || continue
    config="$(node_ctr "$state" content get "$digest" 2>/dev/null \
      | python3 -c 'import json, sys; print(json.load(sys.stdin)["config"]["digest"])' 2>/dev/null || true)"
    [[ -n "$config" ]] && keep+="$config "
  done
  while read -r ref; do
    [[ -n "$ref" && "$keep" != *" $ref "* ]] || continue
    node_ctr "$state" images rm --sync "$ref" >/dev/null && removed=$((removed + 1))
  done < <(node_ctr "$state" images ls -q 2>/dev/null)
  (( removed == 0 )) || log "removed $removed stale image record(s) from containerd's store (older builds)"
}
prune_images

# The node's own services.
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

cat >"$node/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$node/kube-proxy.kubeconfig"}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $NODE_POD_CIDR
healthzBindAddress: 127.0.0.1:$proxy_healthz
metricsBindAddress: 127.0.0.1:$proxy_metrics
# Leave the host's conntrack table sizes and timeouts as they are.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
start kube-proxy "$bindir/kube-proxy" --config="$node/kube-proxy.yaml" --v=1

# CoreDNS reads Services and EndpointSlices as its own user, with what upstream's
# system:coredns role grants.
kubectl apply -f - >"$node/logs/coredns-rbac.log" 2>&1 <<EOF || fail "creating CoreDNS's RBAC failed"
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
# CoreDNS runs on the node itself, not in a pod: its endpoint is the node's address.
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

cat >"$node/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz
tlsCertFile: $node/pki/kubelet-serving.crt
tlsPrivateKeyFile: $node/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$node/containerd/containerd.sock
# These machines: cgroup v1 (hybrid), no systemd cgroup driver, swap allowed.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /rolloutfleet-node
failSwapOn: false
clusterDNS: [$NODE_DNS_SERVICE_IP]
clusterDomain: $NODE_CLUSTER_DOMAIN
podCIDR: $NODE_POD_CIDR
podLogsDir: $node/pod-logs
volumePluginDir: $node/kubelet/volume-plugins
serializeImagePulls: false
# Images are loaded by hand (no registry): never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%}
EOF
# The pods' cgroups live under /rolloutfleet-node in every hierarchy (down.sh removes it).
for hier in /sys/fs/cgroup/*/; do
  [[ -d "$hier" && ! -L "${hier%/}" ]] || continue
  mkdir -p "$hier/rolloutfleet-node" 2>/dev/null || true
done
start kubelet "$bindir/kubelet" --config="$node/kubelet.yaml" --kubeconfig="$node/kubelet.kubeconfig" \
  --root-dir="$node/kubelet" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1
node_ready() {
  kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True
}
wait_for "node $NODE_NAME Ready" node_ready
kubernetes_endpoint() {
  kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes \
    -o jsonpath='{.items[*].endpoints[*].addresses[*]}' | grep -qw "$NODE_IP"
}
wait_for "the kubernetes Service's endpoint" kubernetes_endpoint

cat >>"$state/env" <<EOF
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
NODE_BRIDGE=$NODE_BRIDGE
NODE_STATE_DIR=$node
NODE_CONTAINERD_SOCKET=$node/containerd/containerd.sock
KUBECTL=$tools_dir/kubectl
HELM=$tools_dir/helm
EOF
log "up in $((SECONDS - t_start)) s: node $NODE_NAME Ready at $NODE_IP (kubeconfig: $state/kubeconfig)"
