#!/usr/bin/env bash
# Build the cluster's binaries from the Go modules pinned in hack/cluster/go.mod +
# go.sum (and hack/cluster/coredns/ for CoreDNS), once, into a cache outside the repo:
#
#   hack/cluster/build.sh [control-plane|node]      (default: control-plane)
#
#   control-plane  etcd, kube-apiserver, kube-controller-manager
#   node           kubelet, kube-scheduler, kube-proxy, coredns and `pause` (the pod
#                  sandbox's process, compiled from build/pause/linux/pause.c of the
#                  same k8s.io/kubernetes module: needs a C compiler)
#
#   -> ${ROLLOUTFLEET_CACHE:-$HOME/.cache/rolloutfleet}/cluster/<k8s>-<etcd>/bin/
#
# GOMODCACHE and GOCACHE live under ${ROLLOUTFLEET_CACHE}/go/. A set is skipped
# when its binaries exist and were built from the same go.mod, go.sum and build
# flags (a stamp file per set holds their sha256).
#
# Prints the bin dir on stdout (last line); everything else goes to stderr.
# Env: ROLLOUTFLEET_CACHE, CLUSTER_BUILD_NICE (default 15), CLUSTER_BUILD_FORCE=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
set_name="${1:-control-plane}"
cache="${ROLLOUTFLEET_CACHE:-$HOME/.cache/rolloutfleet}"
nice_lvl="${CLUSTER_BUILD_NICE:-15}"

log() { printf '[cluster-build] %s\n' "$*" >&2; }
die() { printf '[cluster-build] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "Go toolchain not found on PATH (need Go >= 1.25)"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found"
[[ -f "$here/go.mod" && -f "$here/go.sum" ]] || die "missing $here/go.mod or go.sum"

# Versions come from go.mod (both are required directly there).
modver() { awk -v m="$1" '$1==m && $2 ~ /^v/ {print $2; exit}' "$here/go.mod"; }
k8s_version="$(modver k8s.io/kubernetes)"
etcd_version="$(modver go.etcd.io/etcd/server/v3)"
[[ -n "$k8s_version" && -n "$etcd_version" ]] || die "cannot read versions from go.mod"
coredns_version="$(awk '$1=="require" {$1=""; $0=$0} $1=="github.com/coredns/coredns" && $2 ~ /^v/ {print $2; exit}' "$here/coredns/go.mod")"
case "$set_name" in
  control-plane) binaries=(etcd kube-apiserver kube-controller-manager); stamp_name=.stamp ;;
  node)
    binaries=(kubelet kube-scheduler kube-proxy coredns pause); stamp_name=.stamp-node
    [[ -n "$coredns_version" ]] || die "cannot read the CoreDNS version from $here/coredns/go.mod"
    command -v cc >/dev/null 2>&1 || die "no C compiler (cc) for pause: apt-get install gcc"
    ;;
  *) die "unknown set '$set_name' (control-plane | node)" ;;
esac

export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-modcacherw CGO_ENABLED=0
export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build"
gover="$(go env GOVERSION)"
# go.mod says `go 1.25.0`; with GOTOOLCHAIN=local an older Go fails below anyway,
# but say so clearly.
case "$gover" in
  go1.2[5-9]*|go1.[3-9][0-9]*) ;;
  *) die "Go $gover is too old: kubernetes $k8s_version needs Go >= 1.25" ;;
esac

outdir="$cache/cluster/${k8s_version}-${etcd_version}"
bindir="$outdir/bin"
stamp="$bindir/$stamp_name"

# ldflags as upstream hack/lib/version.sh sets them (for both version packages).
k8s_major="${k8s_version#v}"; k8s_major="${k8s_major%%.*}"
k8s_minor="${k8s_version#v*.}"; k8s_minor="${k8s_minor%%.*}"
build_date="1970-01-01T00:00:00Z"   # fixed: keeps the stamp and binaries reproducible
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X ${pkg}.gitVersion=${k8s_version}"
  kube_ldflags+=" -X ${pkg}.gitMajor=${k8s_major}"
  kube_ldflags+=" -X ${pkg}.gitMinor=${k8s_minor}"
  kube_ldflags+=" -X ${pkg}.gitCommit="   # unknown from the module proxy; empty beats "$Format:%H$"
  kube_ldflags+=" -X ${pkg}.gitTreeState=clean"
  kube_ldflags+=" -X ${pkg}.buildDate=${build_date}"
done
etcd_ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${etcd_version}"

want_stamp="$( { cat "$here/go.mod" "$here/go.sum"; echo "$set_name ${binaries[*]}"; echo "$gover"; echo "$kube_ldflags"; echo "$etcd_ldflags"
  if [[ "$set_name" == node ]]; then cat "$here/coredns/go.mod" "$here/coredns/go.sum"; cc --version | head -n1; fi; } | sha256sum | cut -d' ' -f1)"

all_built() { local b; for b in "${binaries[@]}"; do [[ -x "$bindir/$b" ]] || return 1; done; }
if [[ "${CLUSTER_BUILD_FORCE:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" ]] && all_built; then
  log "up to date ($set_name): kubernetes $k8s_version, etcd $etcd_version${coredns_version:+, coredns $coredns_version} ($bindir)"
  echo "$bindir"
  exit 0
fi

log "building $set_name: kubernetes $k8s_version + etcd $etcd_version${coredns_version:+ + coredns $coredns_version} with $gover (nice $nice_lvl) -> $bindir"
mkdir -p "$bindir" "$outdir/logs"
rm -f "$stamp"
tmpbin="$(mktemp -d "$outdir/bin.tmp.XXXXXX")"
trap 'rm -rf "$tmpbin"' EXIT

timer=()
if [[ -x /usr/bin/time ]]; then timer=(/usr/bin/time -v); fi

cd "$here"
start=$(date +%s)
log "downloading modules"
nice -n "$nice_lvl" go mod download -x >"$outdir/logs/download.log" 2>&1 \
  || { tail -n 30 "$outdir/logs/download.log" >&2; die "go mod download failed"; }

build_one() { # name ldflags pkg [module dir]
  local name="$1" ldflags="$2" pkg="$3" moddir="${4:-$here}" t0 rc=0
  t0=$(date +%s)
  log "go build $name ($pkg)"
  ( cd "$moddir" && "${timer[@]}" nice -n "$nice_lvl" go build -trimpath -ldflags "$ldflags" -o "$tmpbin/$name" "$pkg" ) \
    >"$outdir/logs/build-$name.log" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    tail -n 40 "$outdir/logs/build-$name.log" >&2
    die "building $name failed (rc=$rc); full log: $outdir/logs/build-$name.log"
  fi
  local peak
  peak="$(awk -F': ' '/Maximum resident set size/ {printf "%.0f MiB", $2/1024}' "$outdir/logs/build-$name.log")"
  log "  $name: $(( $(date +%s) - t0 )) s${peak:+, peak RSS of one process $peak}"
}

if [[ "$set_name" == control-plane ]]; then
  build_one etcd "$etcd_ldflags" go.etcd.io/etcd/server/v3
  build_one kube-apiserver "$kube_ldflags" k8s.io/kubernetes/cmd/kube-apiserver
  build_one kube-controller-manager "$kube_ldflags" k8s.io/kubernetes/cmd/kube-controller-manager
  "$tmpbin/kube-apiserver" --version >&2 || die "built kube-apiserver does not run"
  "$tmpbin/etcd" --version >&2 || die "built etcd does not run"
else
  ( cd "$here/coredns" && nice -n "$nice_lvl" go mod download -x ) >"$outdir/logs/download-coredns.log" 2>&1 \
    || { tail -n 30 "$outdir/logs/download-coredns.log" >&2; die "go mod download (coredns) failed; log: $outdir/logs/download-coredns.log"; }
  build_one kubelet "$kube_ldflags" k8s.io/kubernetes/cmd/kubelet
  build_one kube-scheduler "$kube_ldflags" k8s.io/kubernetes/cmd/kube-scheduler
  build_one kube-proxy "$kube_ldflags" k8s.io/kubernetes/cmd/kube-proxy
  build_one coredns "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$coredns_version" \
    github.com/coredns/coredns "$here/coredns"
  # pause: upstream's C source from the module cache, linked statically (it runs in an
  # image with nothing else in it).
  pause_src="$GOMODCACHE/k8s.io/kubernetes@$k8s_version/build/pause/linux/pause.c"
  [[ -f "$pause_src" ]] || die "missing $pause_src in the module cache"
  cc -Os -Wall -Werror -static -DVERSION="$k8s_version" -o "$tmpbin/pause" "$pause_src" \
    >"$outdir/logs/build-pause.log" 2>&1 || { cat "$outdir/logs/build-pause.log" >&2; die "compiling pause failed; log: $outdir/logs/build-pause.log"; }
  "$tmpbin/kubelet" --version >&2 || die "built kubelet does not run"
  "$tmpbin/coredns" -version >&2 || die "built coredns does not run"
fi
for b in "${binaries[@]}"; do mv -f "$tmpbin/$b" "$bindir/"; done
echo "$want_stamp" >"$stamp"
log "done in $(( $(date +%s) - start )) s"
echo "$bindir"
