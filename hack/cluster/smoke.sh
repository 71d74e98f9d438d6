#!/usr/bin/env bash
# Smoke test of a control plane started by up.sh (run after up.sh):
#   server version, namespaces, garbage collection of an owned object,
#   least-privilege operator identity (Forbidden until a Role grants it),
#   ServiceAccount token issuance.
#
#   hack/cluster/smoke.sh [STATE_DIR]     (default: <repo>/.cluster)
#
# Uses kubectl from get-tools.sh (or $KUBECTL). Leaves nothing behind: it works
# in a namespace of its own and deletes it.
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

state="$(cluster_state_dir "${1:-}")"
[[ -f "$state/kubeconfig" ]] || die "no $state/kubeconfig: run hack/cluster/up.sh first"
kubectl="${KUBECTL:-$("$cluster_here/get-tools.sh" | tail -n1)/kubectl}"
k() { "$kubectl" --kubeconfig "$state/kubeconfig" "$@"; }
kop() { "$kubectl" --kubeconfig "$state/kubeconfig-operator" "$@"; }
ok() { printf '[smoke] ok: %s\n' "$*" >&2; }
ns="smoke-$$"

server_version="$(k version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
[[ "$server_version" == v1.* ]] || die "unexpected server version: $server_version"
ok "server $server_version"

k get ns default kube-system >/dev/null
k create ns "$ns" >/dev/null
trap 'k delete ns "$ns" --wait=false >/dev/null 2>&1 || true' EXIT
ok "namespaces"

# Garbage collector: a ConfigMap owned by a Pod goes away with the Pod.
for _ in $(seq 100); do k -n "$ns" get sa default >/dev/null 2>&1 && break; sleep 0.1; done
k -n "$ns" run owner --image=example.invalid/none --restart=Never -- sleep 1 >/dev/null
uid="$(k -n "$ns" get pod owner -o jsonpath='{.metadata.uid}')"
k -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: child
  ownerReferences: [{apiVersion: v1, kind: Pod, name: owner, uid: "$uid"}]
data: {k: v}
EOF
k -n "$ns" delete pod owner --wait=false >/dev/null
gone=0
for _ in $(seq 150); do
  if ! k -n "$ns" get cm child >/dev/null 2>&1; then gone=1; break; fi
  sleep 0.1
done
[[ $gone == 1 ]] || die "garbage collector did not delete the owned ConfigMap within 15s"
ok "garbage collector removed the owned ConfigMap"

# Least-privilege identity: Forbidden until a Role grants it.
if out="$(kop -n "$ns" get pods 2>&1)"; then die "operator identity could list pods without a Role"; fi
[[ "$out" == *Forbidden* ]] || die "expected Forbidden, got: $out"
k -n "$ns" create role smoke-pods --verb=get,list,watch --resource=pods >/dev/null
k -n "$ns" create rolebinding smoke-pods --role=smoke-pods --user=rolloutfleet-operator-test >/dev/null
granted=0
for _ in $(seq 50); do
  if kop -n "$ns" get pods >/dev/null 2>&1; then granted=1; break; fi
  sleep 0.1
done
[[ $granted == 1 ]] || die "operator identity still forbidden after the RoleBinding"
ok "operator identity: Forbidden without a Role, allowed with one"

# ServiceAccount tokens (TokenRequest) authenticate.
k -n "$ns" create sa smoke >/dev/null
token="$(k -n "$ns" create token smoke)"
who="$("$kubectl" --server "$(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')" \
  --certificate-authority "$state/pki/ca.crt" --token "$token" auth whoami -o jsonpath='{.status.userInfo.username}')"
[[ "$who" == "system:serviceaccount:$ns:smoke" ]] || die "ServiceAccount token authenticated as '$who'"
ok "ServiceAccount token authenticates as $who"
echo "[smoke] PASS" >&2
