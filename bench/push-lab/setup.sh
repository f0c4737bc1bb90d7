# The lab of `npm run bench:push`: a short build, then the moment its health check can first pass (ms).
set -eu
echo '{"phase":"build","state":"running"}' >> "$LABFLEET_STATUS"
sleep 0.5
echo '{"phase":"build","state":"done"}' >> "$LABFLEET_STATUS"
touch built
date +%s%3N > built_at
