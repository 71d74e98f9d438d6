#!/usr/bin/env bash
# `make images`: the worker, operator and Redis images, tagged as the chart's defaults
# (charts/rolloutfleet/values.yaml: repository ghcr.io/rolloutfleet/*, tag = appVersion):
#
#   ghcr.io/rolloutfleet/worker:VERSION       worker/Dockerfile, profile worker-cuda (the default:
#                                             PyPI's torch, GPU nodes and CPU nodes alike)
#   ghcr.io/rolloutfleet/worker:VERSION-slim  profile worker-slim: no torch, no CUDA, no OpenCV (jobs
#                                             whose policies act in numpy; the operator picks it)
#   ghcr.io/rolloutfleet/worker:VERSION-cpu   profile worker-cpu: only where PyTorch's CPU index
#                                             (download.pytorch.org) answers; skipped otherwise
#   ghcr.io/rolloutfleet/operator:VERSION     operator/Dockerfile
#   ghcr.io/rolloutfleet/redis:VERSION        images/redis/Dockerfile
#
# Engine: docker where `docker info` answers, otherwise podman (daemonless; installed
# from Debian's packages when missing). Base images: the Dockerfiles' defaults
# (python:3.11.14-slim-bookworm, debian:bookworm-slim) where a registry is reachable;
# otherwise bases made from Debian's packages with mmdebstrap, named
# localhost/rolloutfleet-base/{python3,debian}:bookworm-<recipe hash> and reused while the
# recipe is unchanged. Every step logs to ~/.cache/rolloutfleet/images/logs/STEP.log.
#
# Environment (the Makefile maps ENGINE=, BASE=, IMAGES=, CPU=, EXPORT= to these):
#   ROLLOUTFLEET_ENGINE  auto | docker | podman
#   ROLLOUTFLEET_BASE    auto | registry | debian   (auto: registry if docker.io answers)
#   ROLLOUTFLEET_IMAGES  which images, in order (default: "operator redis worker-slim worker worker-cpu")
#   ROLLOUTFLEET_CPU     auto | yes | no            (the -cpu worker; auto: probe the CPU index)
#   ROLLOUTFLEET_EXPORT  1: then hack/images/export.sh (OCI archives for containerd)
#   ROLLOUTFLEET_DEBIAN_MIRROR  (http://deb.debian.org/debian), ROLLOUTFLEET_DEBIAN_SECURITY_MIRROR
#   ROLLOUTFLEET_BASE_REFRESH=1  rebuild the Debian bases (e.g. for new security updates)
#   ROLLOUTFLEET_SMOKE=0  skip the checks run inside each image after its build
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/images/lib.sh
source "$here/lib.sh"
cd "$images_root"

version="$(images_version)"
engine="$(images_engine)"
registry="ghcr.io/rolloutfleet"
wanted="${ROLLOUTFLEET_IMAGES:-operator redis worker-slim worker worker-cpu}"
suite=bookworm
mirror="${ROLLOUTFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security="${ROLLOUTFLEET_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
root_cmd=()
[[ "$(id -u)" == 0 ]] || root_cmd=(sudo -n)

exec 9>"$images_cache/.lock"
flock -n 9 || { say "lock failed: another make images is running ($images_cache/.lock)" >&2; exit 1; }
total=$SECONDS

for image in $wanted; do
  case "$image" in
    worker | worker-slim | worker-cpu | operator | redis) ;;
    *) say "images failed: unknown image '$image' (worker worker-slim worker-cpu operator redis)" >&2; exit 1 ;;
  esac
done

# --- tools ------------------------------------------------------------------------------
need=()
if [[ "$engine" == podman ]]; then
  command -v podman >/dev/null || need+=(podman)
  command -v runc >/dev/null || need+=(runc)
fi
base_mode="${ROLLOUTFLEET_BASE:-auto}"
if [[ "$base_mode" == auto ]]; then
  # Any HTTP answer from Docker Hub's registry API (401 included) means it is reachable.
  if curl -sS -o /dev/null --max-time 5 https://registry-1.docker.io/v2/ 2>/dev/null; then
    base_mode=registry
  else
    base_mode=debian
  fi
fi
case "$base_mode" in
  registry) ;;
  debian) command -v mmdebstrap >/dev/null || need+=(mmdebstrap) ;;
  *) say "base failed: ROLLOUTFLEET_BASE=$base_mode (auto | registry | debian)" >&2; exit 1 ;;
esac
if ((${#need[@]})); then
  command -v apt-get >/dev/null || { say "tools failed: ${need[*]} missing and no apt-get to install them" >&2; exit 1; }
  say "installing ${need[*]} (Debian packages)"
  step tools 900 "${root_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
    bash -c 'apt-get update && apt-get install -y --no-install-recommends "$@"' apt-get "${need[@]}"
fi
say "engine $engine, base $base_mode, version $version, logs in $images_logs"

# --- bases ------------------------------------------------------------------------------
# debian_base NAME PACKAGES: a minbase $suite root filesystem from Debian's packages
# (security updates included, docs and locales left out like debian:*-slim), imported as
# localhost/rolloutfleet-base/NAME:$suite-<hash of the recipe>; reused while it exists.
# Sets base_ref.
debian_base() {
  local name="$1" packages="$2" recipe hash ref tar
  local sources=("deb $mirror $suite main" "deb $mirror $suite-updates main" "deb $security $suite-security main")
  local opts=(--variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr "--include=$packages"
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-exclude=/usr/share/info/*')
  recipe="$(printf '%s\n' 2 "$suite" "${opts[@]}" "${sources[@]}")"
  hash="$(sha256sum <<<"$recipe" | cut -c1-12)"
  ref="localhost/rolloutfleet-base/$name:$suite-$hash"
  tar="$images_cache/base/$name-$suite-$hash.tar"
  if [[ "${ROLLOUTFLEET_BASE_REFRESH:-0}" == 1 ]]; then
    rm -f "$tar"
    "$engine" rmi "$ref" >/dev/null 2>&1 || true
  fi
  if ! image_id "$ref" >/dev/null; then
    mkdir -p "$images_cache/base"
    if [[ ! -s "$tar" ]]; then
      say "base $ref: mmdebstrap ($packages)"
      local dir="${tar%.tar}.part.d"
      rm -rf "$dir" "${tar%.tar}.part.tar"
      step "base-$name-mmdebstrap" 1200 "${root_cmd[@]}" mmdebstrap "${opts[@]}" "$suite" "$dir" "${sources[@]}"
      # Into a directory, then tar: the archive's first entry is the root itself, mode 0755.
      # mmdebstrap's own tar has no "./" entry, and an image whose layers never say what /
      # is gets the runtime's default (containerd: 0700), which a non-root user cannot even
      # traverse ("executable file not found in $PATH" for every command).
      # shellcheck disable=SC2016  # expanded by the inner bash
      step "base-$name-tar" 600 "${root_cmd[@]}" bash -c \
        'chmod 0755 "$1" && tar --numeric-owner --xattrs --xattrs-include="*" -C "$1" -cf "$2" . && rm -rf "$1"' \
        _ "$dir" "${tar%.tar}.part.tar"
      mv "${tar%.tar}.part.tar" "$tar"
      say "base $ref: root filesystem in ${step_seconds}s"
    fi
    step "base-$name-import" 600 "$engine" import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' \
      --change "LABEL io.rolloutfleet.base.recipe=$hash io.rolloutfleet.base.packages=$packages" \
      "$tar" "$ref"
    say "base $ref: imported in ${step_seconds}s"
  fi
  base_ref="$ref"
}

build_args_python=()
build_args_debian=()
pull=()
if [[ "$base_mode" == debian ]]; then
  needs_python=0
  needs_debian=0
  for image in $wanted; do
    case "$image" in
      redis) needs_debian=1 ;;
      *) needs_python=1 ;;
    esac
  done
  if ((needs_python)); then
    debian_base python3 python3,python3-venv,passwd,ca-certificates
    build_args_python=(--build-arg "PYTHON_IMAGE=$base_ref")
  fi
  if ((needs_debian)); then
    debian_base debian passwd
    build_args_debian=(--build-arg "DEBIAN_IMAGE=$base_ref")
  fi
  # Local bases only: never ask a registry.
  [[ "$engine" == podman ]] && pull=(--pull=never)
elif [[ "$engine" == podman ]]; then
  # podman with short names may ask which registry to use: name the Dockerfiles' defaults fully.
  build_args_python=(--build-arg "PYTHON_IMAGE=docker.io/library/$(sed -n 's/^ARG PYTHON_IMAGE=//p' worker/Dockerfile)")
  build_args_debian=(--build-arg "DEBIAN_IMAGE=docker.io/library/$(sed -n 's/^ARG DEBIAN_IMAGE=//p' images/redis/Dockerfile)")
fi

# --- builds -----------------------------------------------------------------------------
build_opts=(--network=host)
if [[ "$engine" == podman ]]; then
  build_opts+=(--layers "${pull[@]}")
  # Behind a TLS-intercepting proxy pip trusts only the host's CA bundle: mount it for the
  # build steps (never part of an image; the images keep Debian's ca-certificates).
  host_ca=/etc/ssl/certs/ca-certificates.crt
  [[ -s "$host_ca" ]] && build_opts+=(--volume "$host_ca:$host_ca:ro")
else
  export DOCKER_BUILDKIT=1 # RUN --mount=type=cache
fi

built=()
build() { # build NAME TAG LIMIT ARGS... (the last one is the context)
  local name="$1" tag="$2" limit="$3" before after
  shift 3
  before="$(image_id "$tag" || true)"
  step "build-$name" "$limit" "$engine" build "${build_opts[@]}" -t "$tag" "$@"
  after="$(image_id "$tag")"
  if [[ "$before" == "$after" ]]; then
    say "$tag: unchanged (${step_seconds}s)"
  else
    say "$tag: built in ${step_seconds}s"
    # The image this one replaces, unless something else names it: its layers (GBs for
    # the worker after a lock change) would otherwise stay in the store.
    if [[ -n "$before" && -z "$("$engine" image inspect --format '{{join .RepoTags " "}}' "$before" 2>/dev/null)" ]]; then
      "$engine" rmi "$before" >/dev/null 2>&1 || true
    fi
  fi
  built+=("$tag")
}

run_opts=(--rm --network=none --read-only --tmpfs /tmp)
[[ "$engine" == podman ]] && run_opts+=(--read-only-tmpfs=false "${pull[@]}")
smoke() { # smoke NAME TAG COMMAND...: a check run in image TAG, logged like a step; once per image ID
  [[ "${ROLLOUTFLEET_SMOKE:-1}" == 1 ]] || return 0
  local name="$1" stamp
  stamp="$images_cache/checked/$name.$(image_id "$2")"
  shift 2
  if [[ -e "$stamp" ]]; then
    say "  checked inside: $name (this image passed before)"
    return 0
  fi
  step "smoke-$name" 300 "$@"
  mkdir -p "$images_cache/checked"
  rm -f "$images_cache/checked/$name".*
  touch "$stamp"
  say "  checked inside: $name (${step_seconds}s)"
}

cpu_index="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
slim_check='
import importlib.metadata as md, importlib.util as u
import gymnasium, pettingzoo.classic, pygame, ale_py, redis, hiredis, prometheus_client, rolloutfleet.cli.main
gymnasium.make("CartPole-v1").reset(seed=0)
heavy = [m for m in ("torch", "cv2", "triton") if u.find_spec(m)]
heavy += [d.metadata["Name"] for d in md.distributions() if d.metadata["Name"].lower().startswith(("nvidia", "cuda", "torch", "opencv"))]
assert not heavy, f"the slim image holds {heavy}"
print("slim: no torch, no CUDA; gymnasium", gymnasium.__version__, "ale-py", ale_py.__version__)
'
for image in $wanted; do
  case "$image" in
    operator)
      tag="$registry/operator:$version"
      build operator "$tag" 1800 -f operator/Dockerfile "${build_args_python[@]}" .
      smoke operator "$tag" "$engine" run "${run_opts[@]}" --user 10001:10001 "$tag" --help
      ;;
    redis)
      tag="$registry/redis:$version"
      build redis "$tag" 1800 -f images/redis/Dockerfile "${build_args_debian[@]}" images/redis
      # /data: a tmpfs owned by the user (podman's U), as the chart's emptyDir with fsGroup 999.
      data_tmpfs=/data:rw,mode=1777
      [[ "$engine" == podman ]] && data_tmpfs=/data:rw,U
      smoke redis "$tag" "$engine" run "${run_opts[@]}" --user 999:999 --tmpfs "$data_tmpfs" \
        --volume "$here/redis-smoke.sh:/smoke.sh:ro" "$tag" sh /smoke.sh
      ;;
    worker)
      tag="$registry/worker:$version"
      build worker "$tag" 7200 -f worker/Dockerfile "${build_args_python[@]}" --build-arg PROFILE=worker-cuda .
      smoke worker "$tag" "$engine" run "${run_opts[@]}" --user 10001:10001 "$tag" --help
      smoke worker-torch "$tag" "$engine" run "${run_opts[@]}" --user 10001:10001 --entrypoint python "$tag" \
        -c 'import torch, rolloutfleet.cli.main; print("torch", torch.__version__, "cuda build", torch.version.cuda)'
      ;;
    worker-slim)
      tag="$registry/worker:$version-slim"
      build worker-slim "$tag" 3600 -f worker/Dockerfile "${build_args_python[@]}" --build-arg PROFILE=worker-slim .
      smoke worker-slim "$tag" "$engine" run "${run_opts[@]}" --user 10001:10001 "$tag" --help
      # What a numpy job needs imports; torch, OpenCV and any nvidia/CUDA wheel are absent.
      smoke worker-slim-contents "$tag" "$engine" run "${run_opts[@]}" --user 10001:10001 --entrypoint python "$tag" \
        -c "$slim_check"
      ;;
    worker-cpu)
      case "${ROLLOUTFLEET_CPU:-auto}" in
        no) say "$registry/worker:$version-cpu: skipped (ROLLOUTFLEET_CPU=no)"; continue ;;
        yes) ;;
        *)
          if ! curl -sS -o /dev/null --max-time 8 "$cpu_index/" 2>/dev/null; then
            say "$registry/worker:$version-cpu: skipped: PyTorch's CPU index $cpu_index/ does not answer here (the default worker image runs on CPU nodes too)"
            continue
          fi
          ;;
      esac
      tag="$registry/worker:$version-cpu"
      build worker-cpu "$tag" 7200 -f worker/Dockerfile "${build_args_python[@]}" --build-arg PROFILE=worker-cpu .
      smoke worker-cpu "$tag" "$engine" run "${run_opts[@]}" --user 10001:10001 "$tag" --help
      ;;
  esac
done

for tag in "${built[@]}"; do
  size="$("$engine" image inspect --format '{{.Size}}' "$tag")"
  id="$(image_id "$tag")"
  say "$(awk -v t="$tag" -v s="$size" -v i="${id:0:12}" 'BEGIN { printf "%-42s %7.2f GB  %s", t, s / 1e9, i }')"
done
say "done in $((SECONDS - total))s"
if [[ "${ROLLOUTFLEET_EXPORT:-0}" == 1 ]]; then
  exec "$here/export.sh" "${built[@]}"
fi
