#!/usr/bin/env bash
# Build kube-router from the module pinned in hack/netpol/go.mod + go.sum, once, into a
# cache outside the repo. The real node (hack/node/up.sh) runs only its NetworkPolicy
# controller, so the node's pods get the policies they are given, enforced by
# iptables + ipset:
#
#   hack/netpol/build.sh
#
#   -> ${ROLLOUTFLEET_CACHE:-$HOME/.cache/rolloutfleet}/netpol/<version>/bin/kube-router
#
# Why kube-router and not SIG Network's kube-network-policies: every release of the latter
# that the Go module proxy serves (v0.2.0 on) queues packets with nftables' `queue`
# statement, and this machine's kernel is built without it (CONFIG_NFT_QUEUE unset: `nft
# add rule ... queue num 100` answers "No such file or directory"). kube-router's
# controller, the one k3s embeds, needs iptables, ipset and the physdev match only.
#
# GOMODCACHE and GOCACHE live under ${ROLLOUTFLEET_CACHE}/go/ (shared with the other
# builds). Skipped when the binary exists and was built from the same go.mod, go.sum and
# flags (a stamp file holds their sha256). Prints the output dir on stdout (last line);
# everything else goes to stderr. Env: ROLLOUTFLEET_CACHE, CLUSTER_BUILD_NICE (default
# 15), CLUSTER_BUILD_FORCE=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${ROLLOUTFLEET_CACHE:-$HOME/.cache/rolloutfleet}"
nice_lvl="${CLUSTER_BUILD_NICE:-15}"
module=github.com/cloudnativelabs/kube-router/v2

log() { printf '[netpol-build] %s\n' "$*" >&2; }
die() { printf '[netpol-build] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "Go toolchain not found on PATH (need Go >= 1.25)"
[[ -f "$here/go.mod" && -f "$here/go.sum" ]] || die "missing $here/go.mod or go.sum"
version="$(awk -v m="$module" '$1==m && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")"
[[ -n "$version" ]] || die "cannot read the $module version from $here/go.mod"

export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-modcacherw CGO_ENABLED=0
export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build"
gover="$(go env GOVERSION)"

outdir="$cache/netpol/$version"
stamp="$outdir/.stamp"
# As upstream's Makefile sets them (pkg/version), with a fixed date: reproducible.
ldflags="-s -w -X $module/pkg/version.Version=$version -X $module/pkg/version.BuildDate=1970-01-01T00:00:00Z"
want_stamp="$( { cat "$here/go.mod" "$here/go.sum" "${BASH_SOURCE[0]}"; echo "$gover"; echo "$ldflags"; } | sha256sum | cut -d' ' -f1)"
if [[ "${CLUSTER_BUILD_FORCE:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" \
      && -x "$outdir/bin/kube-router" ]]; then
  log "up to date: kube-router $version ($outdir)"
  echo "$outdir"
  exit 0
fi

log "building kube-router $version with $gover (nice $nice_lvl) -> $outdir"
mkdir -p "$outdir/logs" "$outdir/bin"
rm -f "$stamp"
tmp="$(mktemp -d "$outdir/tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cd "$here"
start=$(date +%s)
nice -n "$nice_lvl" go mod download -x >"$outdir/logs/download.log" 2>&1 \
  || { tail -n 30 "$outdir/logs/download.log" >&2; die "go mod download failed; log: $outdir/logs/download.log"; }
nice -n "$nice_lvl" go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-router" "$module/cmd/kube-router" \
  >"$outdir/logs/build.log" 2>&1 \
  || { tail -n 40 "$outdir/logs/build.log" >&2; die "building kube-router failed; log: $outdir/logs/build.log"; }
"$tmp/kube-router" --version >/dev/null 2>&1 || die "built kube-router does not run"
mv -f "$tmp/kube-router" "$outdir/bin/kube-router"
echo "$want_stamp" >"$stamp"
log "done in $(( $(date +%s) - start )) s"
echo "$outdir"
