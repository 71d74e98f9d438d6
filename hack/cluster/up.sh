#!/usr/bin/env bash
# Start a real Kubernetes control plane on loopback for end-to-end tests:
# etcd + kube-apiserver + kube-controller-manager (no scheduler, no kubelet).
#
#   hack/cluster/up.sh [STATE_DIR]        (default: <repo>/.cluster)
#
# Writes into STATE_DIR:
#   kubeconfig           admin (token user "rolloutfleet-admin", group system:masters)
#   kubeconfig-operator  least-privilege user "rolloutfleet-operator-test" (no groups,
#                        so only what RBAC grants it, like the operator's ServiceAccount)
#   env                  shell-sourceable facts: URLs, ports, tokens, paths
#   pids                 "name pid" per process; logs/ one log per process
#   pki/                 CA, serving cert, service-account signing key
# Idempotent: if the control plane of STATE_DIR is already up it only reports so;
# leftovers of a dead one are stopped and replaced.
#
# Env: CLUSTER_BIN_DIR (use these binaries instead of running build.sh),
#      CLUSTER_UP_TIMEOUT (seconds, default 120),
#      CLUSTER_SA_ADMISSION=0 (disable the ServiceAccount admission plugin as
#      envtest does; default 1 = enabled, pods get token volumes like on a real cluster),
#      CLUSTER_ADVERTISE_ADDRESS (default 127.0.0.1: the API server listens and
#      advertises there; hack/node/up.sh passes the node bridge's address so pods reach
#      the `kubernetes` Service, whose endpoint the API server then keeps itself).
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

state="$(cluster_state_dir "${1:-}")"
timeout_s="${CLUSTER_UP_TIMEOUT:-120}"
sa_admission="${CLUSTER_SA_ADMISSION:-1}"
address="${CLUSTER_ADVERTISE_ADDRESS:-127.0.0.1}"
[[ "$address" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "CLUSTER_ADVERTISE_ADDRESS must be an IPv4 address, got '$address'"

for tool in openssl curl python3 base64 setsid; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found on PATH"
done

admin_curl() { # path -> body on stdout; fails on HTTP errors
  local token
  token="$(cat "$state/pki/admin.token")"
  curl -fsS --max-time 5 --cacert "$state/pki/ca.crt" -H "Authorization: Bearer $token" \
    "https://$(cat "$state/apiserver.address"):$(cat "$state/apiserver.port")$1"
}

# --- already up? ------------------------------------------------------------
if [[ -f "$state/$cluster_marker" ]] && cluster_all_alive "$state" \
   && [[ "$(admin_curl /readyz 2>/dev/null)" == ok ]]; then
  log "already up: $state (kubeconfig: $state/kubeconfig)"
  exit 0
fi
cluster_check_deletable "$state"
if [[ -f "$state/pids" ]]; then
  log "stopping leftovers of a previous control plane in $state"
  cluster_stop_pids "$state"
fi
rm -rf "$state"

# --- binaries -----------------------------------------------------------------
if [[ -n "${CLUSTER_BIN_DIR:-}" ]]; then
  bindir="$CLUSTER_BIN_DIR"
else
  bindir="$("$cluster_here/build.sh" | tail -n1)" || die "build.sh failed"
fi
for b in etcd kube-apiserver kube-controller-manager; do
  [[ -x "$bindir/$b" ]] || die "missing $bindir/$b (run hack/cluster/build.sh)"
done

t_start=$SECONDS
mkdir -p "$state/pki" "$state/logs" "$state/etcd"
chmod 700 "$state" "$state/etcd"
touch "$state/$cluster_marker"

# --- ports ----------------------------------------------------------------------
read -r etcd_port etcd_peer_port api_port < <(ADDRESS="$address" python3 - <<'PY'
import os
import socket
socks = []
for i in range(3):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1" if i < 2 else os.environ["ADDRESS"], 0))
    socks.append(s)
print(*(s.getsockname()[1] for s in socks))
for s in socks:
    s.close()
PY
)
echo "$api_port" >"$state/apiserver.port"
echo "$address" >"$state/apiserver.address"

# --- PKI and credentials ------------------------------------------------------------
pki="$state/pki"
(
  cd "$pki"
  umask 077
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -sha256 \
    -keyout ca.key -out ca.crt -subj "/CN=rolloutfleet-test-ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
  cat >apiserver.ext <<EOF
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:${CLUSTER_ADVERTISE_ADDRESS:-127.0.0.1},IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
  openssl req -new -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
    -subj "/CN=kube-apiserver" 2>/dev/null
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -sha256 -extfile apiserver.ext -out apiserver.crt 2>/dev/null
  # The API server's client certificate towards kubelets (logs, exec, port-forward).
  openssl req -new -newkey rsa:2048 -nodes -keyout kubelet-client.key -out kubelet-client.csr \
    -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >client.ext
  openssl x509 -req -in kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -sha256 -extfile client.ext -out kubelet-client.crt 2>/dev/null
  # Service-account token signing key pair.
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  rand() { openssl rand -hex 24; }
  rand >admin.token; rand >operator.token; rand >kcm.token
  # token,user,uid,"groups"
  {
    echo "$(cat admin.token),rolloutfleet-admin,rolloutfleet-admin,\"system:masters\""
    echo "$(cat operator.token),rolloutfleet-operator-test,rolloutfleet-operator-test"
    echo "$(cat kcm.token),system:kube-controller-manager,system:kube-controller-manager"
  } >tokens.csv
) || die "generating certificates/keys with openssl failed"

server="https://$address:$api_port"
write_kubeconfig() { # file user token
  umask 077
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rolloutfleet-test
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 <"$pki/ca.crt")
users:
- name: $2
  user:
    token: $3
contexts:
- name: $2@rolloutfleet-test
  context:
    cluster: rolloutfleet-test
    user: $2
    namespace: default
current-context: $2@rolloutfleet-test
EOF
}
write_kubeconfig "$state/kubeconfig" rolloutfleet-admin "$(cat "$pki/admin.token")"
write_kubeconfig "$state/kubeconfig-operator" rolloutfleet-operator-test "$(cat "$pki/operator.token")"
write_kubeconfig "$state/kubeconfig-controller-manager" system:kube-controller-manager "$(cat "$pki/kcm.token")"

# --- start processes -----------------------------------------------------------------
: >"$state/pids"
start() { # name args...
  cluster_start "$state" "$1" "$bindir/$1" "${@:2}" || die "$1 did not start"
}

fail() {
  printf '[cluster] ERROR: %s\n' "$*" >&2
  cluster_tail_logs "$state" 25
  log "stopping what was started; logs stay in $state/logs (down.sh removes them)"
  cluster_stop_pids "$state"
  exit 1
}

# wait_for DESCRIPTION COMMAND...: retry until it succeeds, a process dies, or timeout.
wait_for() {
  local what="$1"; shift
  while :; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    local name pid
    while read -r name pid; do
      cluster_pid_is "$pid" "$name" || fail "$name (pid $pid) exited while waiting for $what"
    done <"$state/pids"
    (( SECONDS - t_start < timeout_s )) || fail "timed out after ${timeout_s}s waiting for $what"
    sleep 0.25
  done
}

start etcd \
  --name=rolloutfleet-test \
  --data-dir="$state/etcd" \
  --listen-client-urls="http://127.0.0.1:$etcd_port" \
  --advertise-client-urls="http://127.0.0.1:$etcd_port" \
  --listen-peer-urls="http://127.0.0.1:$etcd_peer_port" \
  --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster="rolloutfleet-test=http://127.0.0.1:$etcd_peer_port" \
  --unsafe-no-fsync=true \
  --log-level=warn
etcd_ok() { curl -fsS --max-time 2 "http://127.0.0.1:$etcd_port/health" | grep -q '"health":"true"'; }
wait_for "etcd /health" etcd_ok

if [[ "$sa_admission" == 1 ]]; then
  admission=(--enable-admission-plugins=ServiceAccount,NodeRestriction)
else
  admission=(--enable-admission-plugins=NodeRestriction --disable-admission-plugins=ServiceAccount)
fi
# A loopback address cannot be a Service endpoint: the `kubernetes` Service then gets none.
if [[ "$address" == 127.* ]]; then
  endpoints=(--endpoint-reconciler-type=none)
else
  endpoints=(--endpoint-reconciler-type=lease)
fi
start kube-apiserver \
  --etcd-servers="http://127.0.0.1:$etcd_port" \
  --bind-address="$address" \
  --advertise-address="$address" \
  --secure-port="$api_port" \
  --cert-dir="$pki" \
  --tls-cert-file="$pki/apiserver.crt" \
  --tls-private-key-file="$pki/apiserver.key" \
  --client-ca-file="$pki/ca.crt" \
  --token-auth-file="$pki/tokens.csv" \
  --authorization-mode=Node,RBAC \
  --kubelet-client-certificate="$pki/kubelet-client.crt" \
  --kubelet-client-key="$pki/kubelet-client.key" \
  --kubelet-certificate-authority="$pki/ca.crt" \
  --kubelet-preferred-address-types=InternalIP \
  --service-cluster-ip-range=10.0.0.0/24 \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$pki/sa.pub" \
  --service-account-signing-key-file="$pki/sa.key" \
  --allow-privileged=true \
  "${endpoints[@]}" \
  "${admission[@]}" \
  --profiling=false \
  --v=1
api_ready() { [[ "$(admin_curl /readyz)" == ok ]]; }
wait_for "kube-apiserver /readyz" api_ready

start kube-controller-manager \
  --kubeconfig="$state/kubeconfig-controller-manager" \
  --bind-address=127.0.0.1 \
  --secure-port=0 \
  --leader-elect=false \
  --use-service-account-credentials=true \
  --service-account-private-key-file="$pki/sa.key" \
  --root-ca-file="$pki/ca.crt" \
  --cluster-signing-cert-file="$pki/ca.crt" \
  --cluster-signing-key-file="$pki/ca.key" \
  --controllers='*' \
  --node-monitor-period=2s \
  --node-monitor-grace-period=20s \
  --flex-volume-plugin-dir="$state/flexvolume" \
  --profiling=false \
  --v=1
wait_for "namespace default" admin_curl /api/v1/namespaces/default
wait_for "serviceaccount default/default" admin_curl /api/v1/namespaces/default/serviceaccounts/default

cat >"$state/env" <<EOF
# Sourceable facts about the control plane started by hack/cluster/up.sh
CLUSTER_STATE_DIR=$state
KUBECONFIG_ADMIN=$state/kubeconfig
KUBECONFIG_OPERATOR=$state/kubeconfig-operator
KUBE_APISERVER_URL=$server
KUBE_APISERVER_PORT=$api_port
KUBE_CA_FILE=$pki/ca.crt
KUBE_ADMIN_TOKEN=$(cat "$pki/admin.token")
KUBE_OPERATOR_USER=rolloutfleet-operator-test
KUBE_OPERATOR_TOKEN=$(cat "$pki/operator.token")
ETCD_URL=http://127.0.0.1:$etcd_port
CLUSTER_BIN_DIR=$bindir
EOF
[[ "${CLUSTER_KUEUE:-1}" == 0 ]] || "$cluster_repo_root/hack/kueue/up.sh" "$state" || fail "Kueue did not start (CLUSTER_KUEUE=0 skips it)"
log "up in $((SECONDS - t_start)) s: $server ($(admin_curl /version | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p'))"
log "kubeconfig: $state/kubeconfig   operator: $state/kubeconfig-operator"
