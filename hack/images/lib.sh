# Shared by hack/images/*.sh: the engine, the cache directory and logged steps.
# shellcheck shell=bash
# shellcheck disable=SC2034 # step_seconds is read by the scripts that source this file

images_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
images_cache="${ROLLOUTFLEET_CACHE:-$HOME/.cache/rolloutfleet}/images"
images_logs="$images_cache/logs"
mkdir -p "$images_logs"
# podman reads only this file (not /etc/containers/containers.conf, not the user's).
export CONTAINERS_CONF="${CONTAINERS_CONF:-$images_root/hack/images/containers.conf}"

say() { printf 'images: %s\n' "$*"; }

step_seconds=0 # how long the last step took

# The image version: the chart's appVersion; the Makefile's VERSION must agree.
images_version() {
  local app
  app="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$images_root/charts/rolloutfleet/Chart.yaml")"
  [[ -n "$app" ]] || { say "version failed: no appVersion in charts/rolloutfleet/Chart.yaml" >&2; return 1; }
  if [[ -n "${VERSION:-}" && "$VERSION" != "$app" ]]; then
    say "version failed: VERSION=$VERSION but charts/rolloutfleet/Chart.yaml says appVersion $app (keep them one)" >&2
    return 1
  fi
  printf '%s\n' "$app"
}

# step NAME TIMEOUT COMMAND...: runs COMMAND with its output in $images_logs/NAME.log,
# then prints how long it took; on failure, one line naming the step and its log (plus
# the log's tail) and exit 1. stdin is /dev/null: nothing can wait for an answer.
step() {
  local name="$1" limit="$2" log="$images_logs/$1.log" start rc=0
  shift 2
  start=$SECONDS
  { printf '# %s: %s\n' "$(date -Is)" "$*"; } >"$log"
  timeout -k 30 "$limit" "$@" </dev/null >>"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    ((rc == 124)) && printf '\n# timed out after %ss\n' "$limit" >>"$log"
    tail -n 15 "$log" | sed 's/^/  | /' >&2
    say "$name failed, log: $log" >&2
    exit 1
  fi
  step_seconds=$((SECONDS - start))
}

# The engine: docker where `docker info` answers (a daemon), podman otherwise.
# ROLLOUTFLEET_ENGINE=docker|podman chooses.
images_engine() {
  case "${ROLLOUTFLEET_ENGINE:-auto}" in
    docker | podman) printf '%s\n' "$ROLLOUTFLEET_ENGINE" ;;
    auto)
      if command -v docker >/dev/null && timeout 20 docker info </dev/null >/dev/null 2>&1; then
        echo docker
      else
        echo podman
      fi
      ;;
    *)
      say "engine failed: ROLLOUTFLEET_ENGINE=$ROLLOUTFLEET_ENGINE (docker | podman | auto)" >&2
      return 1
      ;;
  esac
}

# The image ID of a reference, with the engine images_engine chose ($engine) (hex, no "sha256:"); fails when there is no such image.
image_id() {
  local id
  id="$("${engine:?}" image inspect --format '{{.Id}}' "$1" 2>/dev/null)" || return 1
  printf '%s\n' "${id#sha256:}"
}
