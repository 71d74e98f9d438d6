# Shared helpers for up.sh / down.sh (sourced, not executed).
# shellcheck shell=bash

cluster_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cluster_repo_root="$(cd "$cluster_here/../.." && pwd)"
# File that marks a directory as a state dir made by up.sh: nothing else is
# ever deleted by these scripts.
cluster_marker=".rolloutfleet-cluster"

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }

# Absolute path of STATE_DIR (default: <repo>/.cluster); need not exist yet.
cluster_state_dir() {
  local d="${1:-$cluster_repo_root/.cluster}"
  case "$d" in /*) ;; *) d="$PWD/$d" ;; esac
  printf '%s\n' "${d%/}"
}

# Refuse to delete a directory that up.sh did not make.
cluster_check_deletable() {
  local d="$1"
  [[ -n "$d" && "$d" != / && "$d" != "$HOME" && "$d" != "$cluster_repo_root" ]] \
    || die "refusing to use $d as a state dir"
  if [[ -d "$d" && ! -f "$d/$cluster_marker" ]] && [[ -n "$(ls -A "$d" 2>/dev/null)" ]]; then
    die "$d exists, is not empty and was not made by up.sh (no $cluster_marker); refusing to touch it"
  fi
}

# True if PID is alive and is still the program we started (guards against
# PID reuse): its /proc/PID/exe or argv[0] ends with the recorded name.
cluster_pid_is() {
  local pid="$1" name="$2" exe argv0
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # An exited process that nobody has reaped yet (a zombie) counts as gone.
  [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null || true)"
  exe="${exe% (deleted)}"
  argv0="$( { tr '\0' '\n' <"/proc/$pid/cmdline" | head -n1; } 2>/dev/null || true)"
  [[ "${exe##*/}" == "$name" || "${argv0##*/}" == "$name" ]]
}

# Stop the processes listed in STATE_DIR/pids ("name pid" lines) one at a time,
# in reverse start order (controller-manager, apiserver, etcd: the apiserver
# shuts down in about a second while etcd is still there): TERM, wait up to
# CLUSTER_STOP_GRACE seconds (default 10), then KILL.
cluster_stop_pids() {
  local d="$1" grace="${CLUSTER_STOP_GRACE:-10}" name pid i deadline
  local -a names=() pids=()
  [[ -f "$d/pids" ]] || return 0
  while read -r name pid; do
    [[ -n "${name:-}" ]] || continue
    names+=("$name"); pids+=("$pid")
  done <"$d/pids"
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    name="${names[i]}"; pid="${pids[i]}"
    cluster_pid_is "$pid" "$name" || continue
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + grace))
    while cluster_pid_is "$pid" "$name" && [[ $SECONDS -lt $deadline ]]; do sleep 0.1; done
    if cluster_pid_is "$pid" "$name"; then
      log "$name (pid $pid) ignored TERM for ${grace}s; sending KILL"
      kill -KILL "$pid" 2>/dev/null || true
      deadline=$((SECONDS + 5))
      while cluster_pid_is "$pid" "$name" && [[ $SECONDS -lt $deadline ]]; do sleep 0.1; done
    fi
  done
  rm -f "$d/pids"
}

# True if every process in STATE_DIR/pids is alive (and there are three).
cluster_all_alive() {
  local d="$1" name pid n=0
  [[ -f "$d/pids" ]] || return 1
  while read -r name pid; do
    [[ -n "${name:-}" ]] || continue
    cluster_pid_is "$pid" "$name" || return 1
    n=$((n + 1))
  done <"$d/pids"
  [[ $n -eq 3 ]]
}

# cluster_start DIR NAME BINARY ARGS...: start BINARY in a session of its own (so it
# outlives the calling script and a Ctrl-C of its caller), logging to DIR/logs/NAME.log,
# and record "NAME PID" in DIR/pids. A small bash parent in that session waits for it,
# so it is reaped as soon as it exits (no zombie even where PID 1 reaps slowly); the
# recorded pid is the server process itself. Returns 1 if it did not start.
cluster_start() {
  local dir="$1" name="$2" bin="$3"; shift 3
  # shellcheck disable=SC2016  # expanded by the inner bash
  setsid bash -c 'pidfile="$1"; shift; "$@" & echo "$!" >"$pidfile"; wait "$!"' _ \
    "$dir/logs/$name.pid" "$bin" "$@" </dev/null >"$dir/logs/$name.log" 2>&1 &
  for _ in $(seq 50); do [[ -s "$dir/logs/$name.pid" ]] && break; sleep 0.1; done
  [[ -s "$dir/logs/$name.pid" ]] || return 1
  echo "$name $(cat "$dir/logs/$name.pid")" >>"$dir/pids"
  rm -f "$dir/logs/$name.pid"
}

# cluster_tail_logs DIR LINES: the tail of every log in DIR/logs, for a failure message.
cluster_tail_logs() {
  local f
  for f in "$1"/logs/*.log; do
    [[ -f "$f" ]] || continue
    printf '\n===== tail of %s =====\n' "$f" >&2
    tail -n "$2" "$f" >&2
  done
}
