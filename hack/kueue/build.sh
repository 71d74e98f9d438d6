#!/usr/bin/env bash
# Build Kueue's manager from the module pinned in hack/kueue/go.mod + go.sum, once, into
# a cache outside the repo, and copy the manifests up.sh needs from that same module:
#
#   hack/kueue/build.sh
#
#   -> ${ROLLOUTFLEET_CACHE:-$HOME/.cache/rolloutfleet}/kueue/<version>/
#        bin/kueue        sigs.k8s.io/kueue/cmd/kueue
#        manifests/       Kueue's CRDs (config/components/crd/bases) and webhook
#                         configurations (config/components/webhook) of that same module,
#                         as JSON with URL clientConfigs (hack/kueue/manifests/main.go)
#
# GOMODCACHE and GOCACHE live under ${ROLLOUTFLEET_CACHE}/go/ (shared with
# hack/cluster/build.sh). Skipped when the binary exists and was built from the same
# go.mod, go.sum and flags (a stamp file holds their sha256).
#
# Prints the output dir on stdout (last line); everything else goes to stderr.
# Env: ROLLOUTFLEET_CACHE, CLUSTER_BUILD_NICE (default 15), CLUSTER_BUILD_FORCE=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${ROLLOUTFLEET_CACHE:-$HOME/.cache/rolloutfleet}"
nice_lvl="${CLUSTER_BUILD_NICE:-15}"

log() { printf '[kueue-build] %s\n' "$*" >&2; }
die() { printf '[kueue-build] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "Go toolchain not found on PATH (need Go >= 1.25)"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found"
[[ -f "$here/go.mod" && -f "$here/go.sum" ]] || die "missing $here/go.mod or go.sum"

version="$(awk '$1=="sigs.k8s.io/kueue" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")"
[[ -n "$version" ]] || die "cannot read the sigs.k8s.io/kueue version from $here/go.mod"

export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-modcacherw CGO_ENABLED=0
export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build"
gover="$(go env GOVERSION)"
case "$gover" in
  go1.2[5-9]*|go1.[3-9][0-9]*) ;;
  *) die "Go $gover is too old: kueue $version needs Go >= 1.25" ;;
esac

outdir="$cache/kueue/$version"
stamp="$outdir/.stamp"
# As upstream's Makefile sets them (pkg/version), with a fixed date: reproducible.
ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version"
ldflags+=" -X sigs.k8s.io/kueue/pkg/version.BuildDate=1970-01-01T00:00:00Z"

want_stamp="$( { cat "$here/go.mod" "$here/go.sum" "${BASH_SOURCE[0]}" "$here/manifests/main.go"; echo "$gover"; echo "$ldflags"; } | sha256sum | cut -d' ' -f1)"
if [[ "${CLUSTER_BUILD_FORCE:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" \
      && -x "$outdir/bin/kueue" && -f "$outdir/manifests/objects.tsv" ]]; then
  log "up to date: kueue $version ($outdir)"
  echo "$outdir"
  exit 0
fi

log "building kueue $version with $gover (nice $nice_lvl) -> $outdir"
mkdir -p "$outdir/logs"
rm -f "$stamp"
tmp="$(mktemp -d "$outdir/tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

timer=()
if [[ -x /usr/bin/time ]]; then timer=(/usr/bin/time -v); fi

cd "$here"
start=$(date +%s)
nice -n "$nice_lvl" go mod download -x >"$outdir/logs/download.log" 2>&1 \
  || { tail -n 30 "$outdir/logs/download.log" >&2; die "go mod download failed; log: $outdir/logs/download.log"; }
rc=0
"${timer[@]}" nice -n "$nice_lvl" go build -trimpath -ldflags "$ldflags" -o "$tmp/kueue" sigs.k8s.io/kueue/cmd/kueue \
  >"$outdir/logs/build.log" 2>&1 || rc=$?
if [[ $rc -ne 0 ]]; then
  tail -n 40 "$outdir/logs/build.log" >&2
  die "building kueue failed (rc=$rc); full log: $outdir/logs/build.log"
fi
peak="$(awk -F': ' '/Maximum resident set size/ {printf "%.0f MiB", $2/1024}' "$outdir/logs/build.log")"
log "  kueue: $(( $(date +%s) - start )) s${peak:+, peak RSS of one process $peak}"
"$tmp/kueue" --help >/dev/null 2>&1 || die "built kueue does not run"

# The manifests up.sh applies, from the very module the binary was built from.
src="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
mkdir -p "$tmp/manifests"
nice -n "$nice_lvl" go run ./manifests "$src/config/components" "$tmp/manifests" \
  || die "converting kueue's manifests from $src/config/components failed"

mkdir -p "$outdir/bin"
rm -rf "$outdir/manifests"
mv "$tmp/manifests" "$outdir/manifests"
mv -f "$tmp/kueue" "$outdir/bin/kueue"
echo "$want_stamp" >"$stamp"
log "done in $(( $(date +%s) - start )) s"
echo "$outdir"
