# Helpers shared by the wrk-driven benchmarks (server/loadtest/gateway.sh, loadtest/axum.sh); sourced.

# Processes started with `start`, killed when the script exits.
pids=()
cleanup_pids() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

start() { # core, command...
  local core=$1; shift
  taskset -c "$core" "$@" &
  pids+=($!)
}

wait_port() { # port [tries of 0.1 s]
  for _ in $(seq "${2:-100}"); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listening on $1" >&2; exit 1
}

to_ms() { # wrk latency like 1.23ms / 456.00us / 1.01s
  awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n *= 1; else if (v ~ /s$/) n *= 1000; printf "%.3f", n }'
}

# url [pid] -> "rps p50ms p99ms non2xx cpu-us-per-request"; wrk on core 1, DURATION and
# CONNECTIONS from the caller. With a pid, the CPU time (user + system) that process spent
# during the run, divided by the requests wrk completed; otherwise "-".
run_wrk() {
  local out before after
  before=$(cpu_ticks "${2:-}")
  out=$(taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency "$1")
  after=$(cpu_ticks "${2:-}")
  local rps p50 p99 non2xx requests cpu
  rps=$(awk '/^Requests\/sec/ { print $2 }' <<<"$out")
  p50=$(to_ms "$(awk '$1 == "50%" { print $2 }' <<<"$out")")
  p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' <<<"$out")")
  non2xx=$(awk '/Non-2xx/ { print $5 }' <<<"$out")
  requests=$(awk '/requests in/ { print $1 }' <<<"$out")
  cpu=-
  if [ -n "${2:-}" ] && [ "${requests:-0}" -gt 0 ]; then
    cpu=$(awk -v t="$((after - before))" -v hz="$(getconf CLK_TCK)" -v n="$requests" \
      'BEGIN { printf "%.2f", t * 1e6 / hz / n }')
  fi
  echo "$rps $p50 $p99 ${non2xx:-0} $cpu"
}

cpu_ticks() { # pid -> user + system clock ticks so far (0 without a pid)
  if [ -n "$1" ] && [ -r "/proc/$1/stat" ]; then
    # Fields after the parenthesised command name: utime and stime are the 12th and 13th.
    sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
  else
    echo 0
  fi
}

median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

machine() {
  echo "machine: $(nproc) cores, $(awk -F: '/model name/ { print $2; exit }' /proc/cpuinfo | sed 's/^ //'); $(date -u +%F)"
}

# An nginx config under $work/NAME (the caller's scratch folder): one worker, no daemon,
# no access log, BODY inside `http { }`.
nginx_conf() { # name, port, server block body
  mkdir -p "$work/$1"
  cat > "$work/$1/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
user root;
pid $work/$1/nginx.pid;
error_log $work/$1/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/$1/body;
  proxy_temp_path $work/$1/proxy;
  fastcgi_temp_path $work/$1/fastcgi;
  uwsgi_temp_path $work/$1/uwsgi;
  scgi_temp_path $work/$1/scgi;
  $3
}
CONF
}
