import { LONG_POLL_SECONDS } from "./check-in.ts";
import { AGENT_STDERR_MAX, AGENT_STDOUT_MAX } from "./commands.ts";
import { SHELL_SIGNER } from "./signing.ts";

export const AGENT_VERSION = "1";

/**
 * The agent an enrolled host runs (served at GET /agent/v1/agent.sh): bash, curl and openssl, nothing else.
 *
 * - `join <api>`: joins with the join token in LABFLEET_JOIN_TOKEN (the environment, never argv), sending the
 *   machine's name (LABFLEET_NAME, else its hostname) and facts to POST /agent/v1/enroll; writes the answer to
 *   `~/.labfleet-agent/<workshop>.env` (mode 0600), keeps a copy of itself beside it and runs.
 * - `run [workshop]`: the loop. Each signed long poll (POST /agent/v1/poll) is a check-in; the answer's commands
 *   run at once, each in the background under `timeout` (and `sudo -n` when asked), and their results go back
 *   signed (POST /agent/v1/result). `"rotate":true` in an answer: the agent asks POST /agent/v1/rotate for a new
 *   secret and rewrites its env file, and the lab's push.env when there is one (the wrapper signs its pushes
 *   with it). `"forget":true`: the workshop removed this host; the agent deletes its env
 *   file and ends, as it does when a poll is refused with `agent.forgotten` (the workshop was torn down and its
 *   secret dropped).
 *
 * The secret lives in the env file and in a shell variable that is never exported: the commands the agent runs
 * do not see it, and it is never on a command line (SHELL_SIGNER). Answers are JSON whose command fields hold
 * only base64 and plain words, read here with sed.
 */
export function agentScript(): string {
  return `#!/usr/bin/env bash
# labfleet agent ${AGENT_VERSION}: joins a workshop with a join token, then long-polls labfleet for commands.
#   curl -fsSL <api>/agent/v1/agent.sh | LABFLEET_JOIN_TOKEN=... bash -s -- join <api>
#   bash ~/.labfleet-agent/agent.sh run [workshop]
set -u
LABFLEET_AGENT_VERSION=${AGENT_VERSION}
LABFLEET_AGENT_DIR="\${LABFLEET_AGENT_DIR:-$HOME/.labfleet-agent}"
LABFLEET_POLL_WAIT="\${LABFLEET_POLL_WAIT:-${LONG_POLL_SECONDS}}"
${SHELL_SIGNER}
labfleet_say() { printf 'labfleet agent: %s\\n' "$*" >&2; }
labfleet_die() { labfleet_say "$*"; exit 1; }
# The value of a JSON string or number field of a one-level object (values without quotes or backslashes).
labfleet_field() { sed -n "s/.*\\"$1\\":\\"\\{0,1\\}\\([^\\",}]*\\).*/\\1/p" | head -n 1; }
labfleet_clean() { printf '%s' "$1" | tr -c 'A-Za-z0-9 ._()/+-' '_' | cut -c1-"\${2:-100}"; }

labfleet_facts() {
  local os="" arch cpus mem disk kvm=false nested=false cmds="" c
  [ -r /etc/os-release ] && os=$(. /etc/os-release && printf '%s' "\${PRETTY_NAME:-\${NAME:-}}")
  arch=$(uname -m)
  cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 0)
  mem=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo 2>/dev/null || echo 0)
  disk=$(df -Pk "$HOME" 2>/dev/null | awk 'NR == 2 {print int($4 / 1048576)}')
  [ -c /dev/kvm ] && kvm=true
  grep -qsE '^[1Y]' /sys/module/kvm_intel/parameters/nested /sys/module/kvm_amd/parameters/nested && nested=true
  for c in git docker podman qemu-system-x86_64 virsh python3 make gcc curl tar sudo; do
    command -v "$c" >/dev/null 2>&1 && cmds="$cmds\${cmds:+,}\\"$c\\""
  done
  printf '{"hostname":"%s","os":"%s","arch":"%s","cpus":%d,"memoryMb":%d,"diskGb":%d,"kvm":%s,"nested":%s,"commands":[%s],"agentVersion":"%s"}' \\
    "$(labfleet_clean "$(hostname 2>/dev/null || echo host)" 64)" "$(labfleet_clean "$os")" "$(labfleet_clean "$arch" 20)" \\
    "\${cpus:-0}" "\${mem:-0}" "\${disk:-0}" "$kvm" "$nested" "$cmds" "$LABFLEET_AGENT_VERSION"
}

# Writes the env file of a workshop (mode 0600, replaced whole so a reader never sees half of it).
labfleet_write_env() {
  local file="$LABFLEET_AGENT_DIR/$LABFLEET_WORKSHOP.env"
  ( umask 077 && printf "LABFLEET_API='%s'\\nLABFLEET_WORKSHOP='%s'\\nLABFLEET_HOST_ID='%s'\\nLABFLEET_HOST_SECRET='%s'\\n" \\
      "$LABFLEET_API" "$LABFLEET_WORKSHOP" "$LABFLEET_HOST_ID" "$LABFLEET_HOST_SECRET" > "$file.new" ) &&
    mv -f "$file.new" "$file"
}

labfleet_join() {
  local api="\${1:-}" token="\${LABFLEET_JOIN_TOKEN:-}" name body answer enrollment
  unset LABFLEET_JOIN_TOKEN
  [ -n "$api" ] || labfleet_die "usage: LABFLEET_JOIN_TOKEN=... bash agent.sh join <api>"
  [ -n "$token" ] || labfleet_die "set LABFLEET_JOIN_TOKEN to the join token (labfleet hosts join-token prints it)"
  case "$token" in *[!A-Za-z0-9._~-]*) labfleet_die "LABFLEET_JOIN_TOKEN is not a join token";; esac
  api="\${api%/}"
  name=$(labfleet_clean "\${LABFLEET_NAME:-$(hostname 2>/dev/null || echo host)}" 64)
  ( umask 077 && mkdir -p "$LABFLEET_AGENT_DIR" ) || labfleet_die "cannot create $LABFLEET_AGENT_DIR"
  body=$(umask 077 && mktemp "$LABFLEET_AGENT_DIR/join.XXXXXXXX") || exit 1
  printf '{"token":"%s","name":"%s","facts":%s}' "$token" "$name" "$(labfleet_facts)" > "$body"
  answer=$(curl -sS --fail-with-body -X POST "$api/agent/v1/enroll" -H "content-type: application/json" \\
    --data-binary "@$body" --max-time 60)
  local rc=$?
  rm -f "$body"
  [ "$rc" -eq 0 ] || labfleet_die "the join was refused: $(printf '%s' "$answer" | labfleet_field message)"
  LABFLEET_API="$api"
  LABFLEET_WORKSHOP=$(printf '%s' "$answer" | labfleet_field workshop)
  LABFLEET_HOST_ID=$(printf '%s' "$answer" | labfleet_field hostId)
  LABFLEET_HOST_SECRET=$(printf '%s' "$answer" | labfleet_field secret)
  enrollment=$(printf '%s' "$answer" | labfleet_field enrollment)
  case "$LABFLEET_WORKSHOP$LABFLEET_HOST_ID" in ""|*[!a-z0-9.-]*) labfleet_die "unexpected answer from $api";; esac
  case "$LABFLEET_HOST_SECRET" in ""|*[!0-9a-f]*) labfleet_die "unexpected answer from $api";; esac
  labfleet_write_env || labfleet_die "cannot write $LABFLEET_AGENT_DIR/$LABFLEET_WORKSHOP.env"
  curl -fsS "$api/agent/v1/agent.sh" -o "$LABFLEET_AGENT_DIR/agent.sh.new" --max-time 60 &&
    mv -f "$LABFLEET_AGENT_DIR/agent.sh.new" "$LABFLEET_AGENT_DIR/agent.sh"
  labfleet_say "joined $LABFLEET_WORKSHOP as $LABFLEET_HOST_ID ($enrollment)"
  labfleet_run "$LABFLEET_WORKSHOP"
}

labfleet_load() {
  local workshop="\${1:-}" files
  if [ -z "$workshop" ]; then
    files=$(ls "$LABFLEET_AGENT_DIR"/*.env 2>/dev/null)
    [ -n "$files" ] || labfleet_die "no workshop joined yet (no $LABFLEET_AGENT_DIR/*.env): run join first"
    [ "$(printf '%s\\n' "$files" | wc -l)" -eq 1 ] || labfleet_die "several workshops joined: name one"
    workshop=$(basename "$files" .env)
  fi
  case "$workshop" in ""|*[!a-z0-9-]*) labfleet_die "not a workshop name: $workshop";; esac
  LABFLEET_ENV_FILE="$LABFLEET_AGENT_DIR/$workshop.env"
  [ -r "$LABFLEET_ENV_FILE" ] || labfleet_die "$workshop is not joined ($LABFLEET_ENV_FILE is missing)"
  # shellcheck disable=SC1090
  . "$LABFLEET_ENV_FILE"
}

# Runs one command of a poll's answer and posts its result.
labfleet_command() {
  local json="$1" id timeout sudo d rc start timed=0 o e i
  id=$(printf '%s' "$json" | labfleet_field id)
  timeout=$(printf '%s' "$json" | labfleet_field timeoutSeconds)
  sudo=$(printf '%s' "$json" | labfleet_field sudo)
  case "$id" in cmd_*) ;; *) return;; esac
  d=$(umask 077 && mktemp -d "$LABFLEET_AGENT_DIR/run.XXXXXXXX") || return
  printf '%s' "$json" | labfleet_field script | base64 -d > "$d/cmd"
  printf '%s' "$json" | labfleet_field stdin | base64 -d > "$d/in"
  local -a argv=(bash --noprofile --norc "$d/cmd")
  [ "$sudo" = 1 ] && [ "$(id -u)" != 0 ] && argv=(sudo -n "\${argv[@]}")
  start=$(date +%s)
  ( cd "$HOME" && exec timeout -k 5 "$timeout" "\${argv[@]}" <"$d/in" >"$d/out" 2>"$d/err" 3<&- )
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    [ $(( $(date +%s) - start + 1 )) -ge "\${timeout%.*}" ] && timed=1
  fi
  o=$(($(wc -c <"$d/out"))); e=$(($(wc -c <"$d/err")))
  {
    printf '{"id":"%s","exitCode":%d,"timedOut":%s,"outBytes":%d,"errBytes":%d,"stdout":"' \\
      "$id" "$rc" "$([ "$timed" = 1 ] && echo true || echo false)" "$o" "$e"
    head -c ${AGENT_STDOUT_MAX} "$d/out" | base64 | tr -d '\\n'
    printf '","stderr":"'
    head -c ${AGENT_STDERR_MAX} "$d/err" | base64 | tr -d '\\n'
    printf '"}'
  } > "$d/result"
  rm -f "$d/cmd" "$d/in" "$d/out" "$d/err"
  for i in 1 2 3 4 5; do
    labfleet_signed_curl POST /agent/v1/result "$d/result" --max-time 30 -o /dev/null 2>/dev/null && break
    sleep "$i"
  done
  rm -rf "$d"
}

labfleet_rotate() {
  local d answer secret
  d=$(umask 077 && mktemp "$LABFLEET_AGENT_DIR/rotate.XXXXXXXX") || return
  printf '{}' > "$d"
  answer=$(labfleet_signed_curl POST /agent/v1/rotate "$d" --max-time 30)
  rm -f "$d"
  secret=$(printf '%s' "$answer" | labfleet_field secret)
  case "$secret" in ""|*[!0-9a-f]*) labfleet_say "secret rotation failed; the next poll asks again"; return;; esac
  LABFLEET_HOST_SECRET="$secret"
  labfleet_write_env && labfleet_say "new signing secret"
  labfleet_push_env
}

# The lab's wrapper signs its pushed progress with the host's secret from push.env (written by deploy): after a
# rotation it gets the new one at once, well inside the old one's grace, so pushes keep working.
labfleet_push_env() {
  local f="$HOME/.labfleet/$LABFLEET_WORKSHOP/push.env"
  [ -f "$f" ] || return 0
  ( umask 077 && grep -v '^LABFLEET_HOST_SECRET=' "$f" > "$f.new" &&
    printf "LABFLEET_HOST_SECRET='%s'\\n" "$LABFLEET_HOST_SECRET" >> "$f.new" ) &&
    mv -f "$f.new" "$f" && labfleet_say "push settings have the new secret"
}

labfleet_run() {
  labfleet_load "\${1:-}"
  local poll answer backoff=1 line
  poll=$(umask 077 && mktemp "$LABFLEET_AGENT_DIR/poll.XXXXXXXX") || exit 1
  trap 'rm -f "$poll"' EXIT
  trap 'exit 0' TERM INT
  labfleet_say "calling in to $LABFLEET_API for $LABFLEET_WORKSHOP as $LABFLEET_HOST_ID"
  while :; do
    printf '{"wait":%d,"agentVersion":"%s"}' "$LABFLEET_POLL_WAIT" "$LABFLEET_AGENT_VERSION" > "$poll"
    if ! answer=$(labfleet_signed_curl POST /agent/v1/poll "$poll" --max-time $((LABFLEET_POLL_WAIT + 40)) 2>/dev/null); then
      if [ "$(printf '%s' "$answer" | labfleet_field code)" = agent.forgotten ]; then
        rm -f "$LABFLEET_ENV_FILE"
        labfleet_say "$LABFLEET_WORKSHOP was torn down: forgot it"
        exit 0
      fi
      labfleet_say "no answer from labfleet ($(printf '%s' "$answer" | labfleet_field code)); trying again in $backoff s"
      sleep "$backoff"
      backoff=$((backoff * 2 > 60 ? 60 : backoff * 2))
      continue
    fi
    backoff=1
    case "$answer" in *'"forget":true'*)
      rm -f "$LABFLEET_ENV_FILE"
      labfleet_say "$LABFLEET_WORKSHOP removed this host: forgot it"
      exit 0;;
    esac
    case "$answer" in *'"rotate":true'*) labfleet_rotate;; esac
    while IFS= read -r line; do
      [ -n "$line" ] && labfleet_command "$line" </dev/null &
    done < <(printf '%s' "$answer" | grep -o '{"id":"cmd_[^}]*}')
  done
}

case "\${1:-}" in
  join) shift; labfleet_join "$@";;
  run) shift; labfleet_run "$@";;
  facts) labfleet_facts; echo;;
  *) labfleet_die "usage: agent.sh join <api> | run [workshop] | facts";;
esac
`;
}
