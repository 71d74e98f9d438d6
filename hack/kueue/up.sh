#!/usr/bin/env bash
# Run Kueue's manager (built by hack/kueue/build.sh from the pinned module) as a host
# process next to the control plane of hack/cluster/up.sh STATE_DIR, its webhooks
# reachable from the API server by URL:
#
#   hack/kueue/up.sh STATE_DIR        (hack/cluster/up.sh calls it; down.sh stops it)
#
# - Configuration (config.kueue.x-k8s.io/v1beta2): leader election and internal cert
#   management off, batch/job (Kueue refuses an empty list) and the external framework
#   RolloutJob.v1alpha1.rolloutfleet.io; webhooks on 127.0.0.1:<free port>.
# - Its serving certificate (SAN IP:127.0.0.1) is signed by the cluster's CA, which the
#   webhook configurations and the CRDs' conversion webhooks name as their caBundle.
# - Its identity: a client certificate "kueue-manager" in group system:masters.
# - Kueue reads a metrics certificate from the fixed path /etc/kueue/metrics/certs when
#   internal cert management is off: it runs in a mount namespace of its own where /etc
#   is an overlay holding that file, so the host's /etc is never written (needs root).
# Returns once /readyz answers and the webhooks admit a dry-run ResourceFlavor. Not root:
# says so and starts nothing (STATE_DIR/kueue/env is then absent).
# Writes STATE_DIR/kueue/ (config, certs, logs, pids, env). Env: KUEUE_DIR (a build's
# output dir instead of running build.sh), CLUSTER_UP_TIMEOUT (default 120).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/cluster/lib.sh
source "$here/../cluster/lib.sh"
log() { printf '[kueue] %s\n' "$*" >&2; }
die() { printf '[kueue] ERROR: %s\n' "$*" >&2; exit 1; }

state="$(cluster_state_dir "${1:?usage: hack/kueue/up.sh STATE_DIR}")"
[[ -f "$state/$cluster_marker" && -f "$state/apiserver.port" ]] || die "$state is not a cluster made by hack/cluster/up.sh"
timeout_s="${CLUSTER_UP_TIMEOUT:-120}"
if [[ "$(id -u)" != 0 ]]; then
  # Without Kueue the cluster still serves everything else; its tests say Kueue is missing.
  log "WARNING: Kueue not started: running it as a host process needs root (a mount namespace for its fixed metrics-certificate path)"
  exit 0
fi
command -v unshare >/dev/null 2>&1 || die "unshare not found (util-linux)"

kdir="${KUEUE_DIR:-}"
if [[ -z "$kdir" ]]; then
  kdir="$("$here/build.sh" | tail -n1)" || die "hack/kueue/build.sh failed"
fi
[[ -x "$kdir/bin/kueue" && -f "$kdir/manifests/objects.tsv" ]] || die "no Kueue build in $kdir (run hack/kueue/build.sh)"

k="$state/kueue"
if [[ -f "$k/pids" ]]; then cluster_stop_pids "$k"; fi
rm -rf "$k"
mkdir -p "$k/logs" "$k/certs" "$k/etc-overlay"
chmod 700 "$k"
pki="$state/pki"
api="https://$(cat "$state/apiserver.address"):$(cat "$state/apiserver.port")"
read -r webhook_port health_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')

# --- certificates and kubeconfig ------------------------------------------------------
(
  cd "$k/certs"
  umask 077
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n' >server.ext
  openssl req -new -newkey rsa:2048 -nodes -keyout tls.key -out server.csr -subj "/CN=kueue-webhook" 2>/dev/null
  openssl x509 -req -in server.csr -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 3650 \
    -sha256 -extfile server.ext -out tls.crt 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >client.ext
  openssl req -new -newkey rsa:2048 -nodes -keyout client.key -out client.csr \
    -subj "/O=system:masters/CN=kueue-manager" 2>/dev/null
  openssl x509 -req -in client.csr -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 3650 \
    -sha256 -extfile client.ext -out client.crt 2>/dev/null
  printf '%s\n' \
    'apiVersion: v1' 'kind: Config' \
    'clusters:' "- name: rolloutfleet-test" "  cluster: {server: \"$api\", certificate-authority: \"$pki/ca.crt\"}" \
    'users:' '- name: kueue-manager' "  user: {client-certificate: \"$k/certs/client.crt\", client-key: \"$k/certs/client.key\"}" \
    'contexts:' '- name: kueue' '  context: {cluster: rolloutfleet-test, user: kueue-manager}' \
    'current-context: kueue' >"$k/kubeconfig"
) || die "generating Kueue's certificates with openssl failed"

printf '%s\n' \
  'apiVersion: config.kueue.x-k8s.io/v1beta2' 'kind: Configuration' 'namespace: kueue-system' \
  'health:' "  healthProbeBindAddress: 127.0.0.1:$health_port" \
  'metrics:' '  bindAddress: "0"' \
  'webhook:' '  host: 127.0.0.1' "  port: $webhook_port" "  certDir: $k/certs" \
  'leaderElection:' '  leaderElect: false' \
  'internalCertManagement:' '  enable: false' \
  'manageJobsWithoutQueueName: false' \
  'integrations:' '  frameworks: ["batch/job"]' '  externalFrameworks: ["RolloutJob.v1alpha1.rolloutfleet.io"]' \
  'featureGates:' '  VisibilityOnDemand: false' '  ElasticJobsViaWorkloadSlices: true' >"$k/config.yaml"

# --- CRDs, webhook configurations, namespace ------------------------------------------
admin() { # METHOD PATH [curl args...]: the admin's call; body on stdout, fails on HTTP errors
  curl -fsS --max-time 20 --cacert "$pki/ca.crt" -H "Authorization: Bearer $(cat "$pki/admin.token")" \
    -X "$1" "$api$2" "${@:3}"
}
ca_bundle="$(base64 -w0 <"$pki/ca.crt")"
while IFS=$'\t' read -r path file; do
  sed -e "s|@KUEUE_URL@|https://127.0.0.1:$webhook_port|g" -e "s|@KUEUE_CA_BUNDLE@|$ca_bundle|g" \
    "$kdir/manifests/$file" >"$k/$file"
  admin PATCH "$path?fieldManager=rolloutfleet-kueue-up&force=true" \
    -H 'Content-Type: application/apply-patch+yaml' --data-binary "@$k/$file" >/dev/null \
    || die "applying $file failed"
done <"$kdir/manifests/objects.tsv"
admin POST /api/v1/namespaces -H 'Content-Type: application/json' \
  -d '{"metadata":{"name":"kueue-system"}}' -o /dev/null 2>/dev/null || true
# Kueue's manager exits when a kind it indexes is not yet served: wait for discovery.
served() {
  local found plural
  found="$(admin GET /apis/kueue.x-k8s.io/v1beta2 2>/dev/null)" || return 1
  for plural in $(sed -n 's|^/apis/apiextensions.k8s.io/v1/customresourcedefinitions/\([a-z]*\)\.kueue.x-k8s.io\t.*|\1|p' \
      "$kdir/manifests/objects.tsv"); do
    grep -Eq "\"name\": ?\"$plural\"" <<<"$found" || return 1
  done
}
t_start=$SECONDS
until served; do
  (( SECONDS - t_start < timeout_s )) || die "timed out after ${timeout_s}s waiting for Kueue's CRDs to be served"
  sleep 0.25
done

# --- start ---------------------------------------------------------------------------
# shellcheck disable=SC2016  # expanded by the inner bash, in the new mount namespace
in_own_etc='set -e; m="$1"; certs="$2"; shift 2
mount -t tmpfs -o mode=0700 tmpfs "$m"; mkdir "$m/upper" "$m/work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$m/upper,workdir=$m/work" /etc
mkdir -p /etc/kueue/metrics/certs; cp "$certs/tls.crt" "$certs/tls.key" /etc/kueue/metrics/certs/
exec "$@"'
cluster_start "$k" kueue unshare --mount --propagation private -- bash -c "$in_own_etc" _ \
  "$k/etc-overlay" "$k/certs" "$kdir/bin/kueue" --config="$k/config.yaml" --kubeconfig="$k/kubeconfig" \
  || die "kueue did not start"
t_start=$SECONDS
read -r _ pid <"$k/pids"
ready() {
  [[ "$(curl -fsS --max-time 2 "http://127.0.0.1:$health_port/readyz" 2>/dev/null)" == ok ]] || return 1
  admin POST "/apis/kueue.x-k8s.io/v1beta2/resourceflavors?dryRun=All" -H 'Content-Type: application/json' \
    -d '{"apiVersion":"kueue.x-k8s.io/v1beta2","kind":"ResourceFlavor","metadata":{"name":"rolloutfleet-up-check"}}' \
    -o /dev/null 2>/dev/null
}
until ready; do
  # Alive is enough: the pid is the one we just started (unshare, then bash, then kueue:
  # matching the name could catch it mid-exec and read a live Kueue as gone).
  if ! kill -0 "$pid" 2>/dev/null || [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" == Z ]]; then
    tail -n 30 "$k/logs/kueue.log" >&2
    die "kueue exited while starting; log: $k/logs/kueue.log"
  fi
  if (( SECONDS - t_start > timeout_s )); then
    tail -n 30 "$k/logs/kueue.log" >&2
    cluster_stop_pids "$k"
    die "timed out after ${timeout_s}s waiting for Kueue's /readyz and webhooks; log: $k/logs/kueue.log"
  fi
  sleep 0.5
done
printf '%s\n' "KUEUE_VERSION=$(basename "$kdir")" "KUEUE_WEBHOOK_URL=https://127.0.0.1:$webhook_port" \
  "KUEUE_HEALTH_URL=http://127.0.0.1:$health_port" "KUEUE_LOG=$k/logs/kueue.log" >"$k/env"
log "up in $((SECONDS - t_start)) s: Kueue $(basename "$kdir") (webhooks https://127.0.0.1:$webhook_port, log $k/logs/kueue.log)"
