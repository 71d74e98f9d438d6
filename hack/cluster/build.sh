#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager and etcd from the Go modules
# pinned in hack/cluster/go.mod + go.sum, once, into a cache outside the repo:
#
#   ${ROLLOUTFLEET_CACHE:-$HOME/.cache/rolloutfleet}/cluster/<k8s>-<etcd>/bin/
#
# GOMODCACHE and GOCACHE live under ${ROLLOUTFLEET_CACHE}/go/. The build is
# skipped when the three binaries exist and were built from the same go.mod,
# go.sum and build flags (a stamp file holds their sha256).
#
# Prints the bin dir on stdout (last line); everything else goes to stderr.
# Env: ROLLOUTFLEET_CACHE, CLUSTER_BUILD_NICE (default 15), CLUSTER_BUILD_FORCE=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
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
stamp="$bindir/.stamp"

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

want_stamp="$( { cat "$here/go.mod" "$here/go.sum"; echo "$gover"; echo "$kube_ldflags"; echo "$etcd_ldflags"; } | sha256sum | cut -d' ' -f1)"

if [[ "${CLUSTER_BUILD_FORCE:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" \
      && -x "$bindir/kube-apiserver" && -x "$bindir/kube-controller-manager" && -x "$bindir/etcd" ]]; then
  log "up to date: kubernetes $k8s_version, etcd $etcd_version ($bindir)"
  echo "$bindir"
  exit 0
fi

log "building kubernetes $k8s_version + etcd $etcd_version with $gover (nice $nice_lvl) -> $bindir"
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

build_one() { # name ldflags pkg
  local name="$1" ldflags="$2" pkg="$3" t0 rc=0
  t0=$(date +%s)
  log "go build $name ($pkg)"
  "${timer[@]}" nice -n "$nice_lvl" go build -trimpath -ldflags "$ldflags" -o "$tmpbin/$name" "$pkg" \
    >"$outdir/logs/build-$name.log" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    tail -n 40 "$outdir/logs/build-$name.log" >&2
    die "building $name failed (rc=$rc); full log: $outdir/logs/build-$name.log"
  fi
  local peak
  peak="$(awk -F': ' '/Maximum resident set size/ {printf "%.0f MiB", $2/1024}' "$outdir/logs/build-$name.log")"
  log "  $name: $(( $(date +%s) - t0 )) s${peak:+, peak RSS of one process $peak}"
}

build_one etcd "$etcd_ldflags" go.etcd.io/etcd/server/v3
build_one kube-apiserver "$kube_ldflags" k8s.io/kubernetes/cmd/kube-apiserver
build_one kube-controller-manager "$kube_ldflags" k8s.io/kubernetes/cmd/kube-controller-manager

"$tmpbin/kube-apiserver" --version >&2 || die "built kube-apiserver does not run"
"$tmpbin/etcd" --version >&2 || die "built etcd does not run"
mv -f "$tmpbin"/etcd "$tmpbin"/kube-apiserver "$tmpbin"/kube-controller-manager "$bindir/"
echo "$want_stamp" >"$stamp"
log "done in $(( $(date +%s) - start )) s"
echo "$bindir"
