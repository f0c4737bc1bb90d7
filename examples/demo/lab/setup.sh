#!/usr/bin/env bash
# The demo lab: three phases that take 10 to 30 seconds in all, reporting progress the labfleet way.
# A real lab would install a hypervisor, a cluster or a vulnerable app here; see docs/lab-contract.md.
set -euo pipefail

phase() { printf '{"phase":"%s","state":"%s"}\n' "$1" "$2" >> "$LABFLEET_STATUS"; }
pause() { sleep $(( ${DEMO_MIN_SECONDS:-3} + RANDOM % (${DEMO_SPREAD_SECONDS:-7} + 1) )); }

phase prepare running
echo "preparing $(hostname) for the demo lab"
mkdir -p state && pause
phase prepare done

phase install running
echo "installing the demo service"
printf 'demo service for %s\n' "$LABFLEET_HOST_ID" > state/service.txt
pause
phase install done

phase configure running
password=$(head -c 12 /dev/urandom | base64 | tr -d '/+=')
# The lab's web page (server.mjs, Node only): a server from an earlier build is stopped first, then a new one
# starts detached (it outlives this setup) on a port the system picks, which it writes to state/port.
if [ -s state/server.pid ]; then kill "$(cat state/server.pid)" 2>/dev/null || true; fi
rm -f state/port state/server.pid
setsid -f node server.mjs > state/server.log 2>&1 < /dev/null
for _ in $(seq 100); do [ -s state/port ] && break; sleep 0.1; done
port=$(cat state/port 2>/dev/null) || { echo "the demo web server did not start:" >&2; cat state/server.log >&2; exit 1; }
# Access details for the student who claims this lab; labfleet stores them encrypted. The server reads its
# user and password from this file too.
umask 077
cat > "$LABFLEET_ACCESS" <<JSON
{"urls": {"demo": "http://127.0.0.1:$port/"}, "credentials": {"user": "student", "password": "$password"}, "notes": "Open the demo link and sign in with this user and password. The page is served by your own lab host."}
JSON
pause
touch state/ready
phase configure done
echo "demo lab ready at http://127.0.0.1:$port/"
