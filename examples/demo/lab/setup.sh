#!/usr/bin/env bash
# The demo lab: three phases of about 5, 9 and 5 seconds, reporting progress the labfleet way.
# A real lab would install a hypervisor, a cluster or a vulnerable app here; see docs/lab-contract.md.
# Like a real install, each phase takes about the same time on every build (a few percent of jitter), so the
# console's ready estimate, measured on earlier builds, holds. Knobs, set in lab.setup (for example
# `DEMO_SCALE=0.25 bash setup.sh`):
#   DEMO_SCALE            multiplies every phase's typical time (default 1; 0 for no pause at all)
#   DEMO_JITTER_PERCENT   how far a phase may stray from its typical time, either way (default 3)
#   DEMO_MIN_SECONDS, DEMO_SPREAD_SECONDS   instead, random phases: each pauses MIN plus 0 to SPREAD whole
#                         seconds (defaults 3 and 7 when only one of them is set)
set -euo pipefail

phase() { printf '{"phase":"%s","state":"%s"}\n' "$1" "$2" >> "$LABFLEET_STATUS"; }
number='^[0-9]+([.][0-9]+)?$'
for knob in DEMO_SCALE DEMO_JITTER_PERCENT; do
  if [ -n "${!knob:-}" ] && ! [[ ${!knob} =~ $number ]]; then
    echo "$knob: expected a number such as 0.5, got '${!knob}'" >&2
    exit 2
  fi
done
# pause SECONDS: this phase's work, SECONDS being its typical time.
pause() {
  if [ -n "${DEMO_MIN_SECONDS:-}${DEMO_SPREAD_SECONDS:-}" ]; then
    sleep $(( ${DEMO_MIN_SECONDS:-3} + RANDOM % (${DEMO_SPREAD_SECONDS:-7} + 1) ))
    return
  fi
  sleep "$(awk -v s="$1" -v k="${DEMO_SCALE:-1}" -v j="${DEMO_JITTER_PERCENT:-3}" -v r="$RANDOM" \
    'BEGIN { printf "%.3f", s * k * (1 + j / 100 * (2 * r / 32767 - 1)) }')"
}

phase prepare running
echo "preparing $(hostname) for the demo lab"
mkdir -p state && pause 5
phase prepare done

phase install running
echo "installing the demo service"
printf 'demo service for %s\n' "$LABFLEET_HOST_ID" > state/service.txt
# The lab's web page (server.mjs, Node only): a server from an earlier build is stopped first, then a new one
# starts detached (it outlives this setup) on a port the system picks, which it writes to state/port. It boots
# while the install goes on, and answers students only once the access file below exists.
if [ -s state/server.pid ]; then kill "$(cat state/server.pid)" 2>/dev/null || true; fi
rm -f state/port state/server.pid
setsid -f node server.mjs > state/server.log 2>&1 < /dev/null
pause 9
phase install done

phase configure running
password=$(head -c 12 /dev/urandom | base64 | tr -d '/+=')
for _ in $(seq 100); do [ -s state/port ] && break; sleep 0.1; done
port=$(cat state/port 2>/dev/null) || { echo "the demo web server did not start:" >&2; cat state/server.log >&2; exit 1; }
# Access details for the student who claims this lab; labfleet stores them encrypted. The server reads its
# user and password from this file too.
umask 077
cat > "$LABFLEET_ACCESS" <<JSON
{"urls": {"demo": "http://127.0.0.1:$port/"}, "credentials": {"user": "student", "password": "$password"}, "notes": "Open the demo link and sign in with this user and password. The page is served by your own lab host."}
JSON
pause 5
touch state/ready
phase configure done
echo "demo lab ready at http://127.0.0.1:$port/"
