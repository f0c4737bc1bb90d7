#!/usr/bin/env bash
# Exits 0 when the demo lab can be handed out: what setup built is there and the lab's web page answers.
test -f state/ready && test -s state/service.txt && test -s state/port || exit 1
node -e 'fetch(`http://127.0.0.1:${process.argv[1]}/healthz`).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "$(cat state/port)"
