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
# Access details for the student who claims this lab; labfleet stores them encrypted.
umask 077
cat > "$LABFLEET_ACCESS" <<JSON
{"urls": {"demo": "http://127.0.0.1:8080/"}, "credentials": {"user": "student", "password": "$password"}, "notes": "The demo lab has no real service."}
JSON
pause
touch state/ready
phase configure done
echo "demo lab ready"
