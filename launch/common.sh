# shellcheck shell=bash
# Shared helpers for the launch scripts: `run` executes a command, or only prints it under --dry-run.
DRY_RUN=${DRY_RUN:-0}

# Shell-quote one word only when it needs it, so dry runs print readable, copy-pasteable commands.
shell_word() {
  if [[ "$1" =~ ^[A-Za-z0-9_./:=,@+%-]+$ ]]; then
    printf '%s' "$1"
  else
    local escaped=${1//\'/\'\\\'\'}
    printf "'%s'" "$escaped"
  fi
}

run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    local word line="+"
    for word in "$@"; do
      line+=" $(shell_word "$word")"
    done
    echo "$line"
  else
    "$@"
  fi
}

# Print the calling script's header comment (its usage) and exit 0: the scripts' -h/--help.
usage() {
  sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p;}' "$0"
  exit 0
}

die() {
  echo "error: $*" >&2
  exit 2
}

# Quote a training command (config + overrides) for a remote shell.
quoted_train_command() {
  local out="omnidistill train"
  local arg
  for arg in "$@"; do
    out+=" $(shell_word "$arg")"
  done
  echo "$out"
}

# `OMNIDISTILL_COMPILE_CACHE=URL ` (quoted for a remote shell, with its space) to put before a remote
# command, or nothing when URL is empty: the --compile-cache of the TPU scripts (omnidistill/compile_cache.py).
compile_cache_env() {
  [[ -z "$1" ]] || printf 'OMNIDISTILL_COMPILE_CACHE=%s ' "$(shell_word "$1")"
}
