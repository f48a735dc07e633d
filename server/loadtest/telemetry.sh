#!/usr/bin/env bash
# What telemetry costs a proxied request (issue 49): the gateway under callgrind
# (loadtest/overhead.sh's profile part), instructions per proxied request with telemetry
# off, on at 1 % sampling and on at 100 %, exporting over OTLP/HTTP to a receiver that
# takes every batch (a few lines of Python answering 200) on 127.0.0.1:18086.
#
#   bash server/loadtest/telemetry.sh     # PROFILE_REQUESTS=2000 by default
#
# The export's own work runs in the same process, so it is in the figures (spread over the
# requests whose spans it carries). Needs valgrind, nginx and python3.
set -euo pipefail
cd "$(dirname "$0")/../.."

python3 - <<'PY' &
import http.server
class Take(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 18086), Take).serve_forever()
PY
receiver=$!
out=$(mktemp)
trap 'kill $receiver 2>/dev/null || true; rm -f "$out"' EXIT

endpoint='otlp_endpoint = "http://127.0.0.1:18086/v1/traces"'
for row in "off|" "1 %|[telemetry]\n$endpoint\nsample_ratio = 0.01\n" "100 %|[telemetry]\n$endpoint\nsample_ratio = 1.0\n"; do
  name=${row%%|*}
  extra=${row#*|}
  # Read from its output once the figure is there; then it and its nginx upstream go
  # (run from here, overhead.sh's exit waits on that nginx).
  OTEL_BSP_SCHEDULE_DELAY=200 PROFILE_TOML="$extra" PARTS=profile bash loadtest/overhead.sh >"$out" 2>/dev/null &
  run=$!
  for _ in $(seq 1800); do
    grep -q "gateway instructions per proxied request" "$out" && break
    kill -0 "$run" 2>/dev/null || break
    sleep 0.5
  done
  pkill -P "$run" 2>/dev/null || true
  kill "$run" 2>/dev/null || true
  count=$(awk '/^ *[0-9]+ +instructions per request/ { print $1; exit }' "$out")
  echo "telemetry $name: $count instructions per proxied request"
done
