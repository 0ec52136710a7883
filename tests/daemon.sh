# Sourced by the start.sh and stop.sh of tests/envtest and tests/traefik: a server running in the
# background, known by the pid in its state dir's pid file and by its NAME in its command line.

# running NAME PIDFILE: whether PIDFILE holds the pid of a live NAME process; sets pid.
running() {
  [ -f "$2" ] && pid=$(cat "$2") && kill -0 "$pid" 2>/dev/null && grep -q "$1" "/proc/$pid/cmdline" 2>/dev/null
}

# await_up NAME BEFORE NOT CHECK...: runs CHECK every 0.1s until it succeeds. When process $pid
# exits first ("NAME exited before BEFORE"), or after $timeout seconds ("NAME not NOT after"; then
# it is stopped with $here/stop.sh $dir), prints the last lines of $log and exits 1.
await_up() {
  local name=$1 before=$2 not=$3 start=$SECONDS
  shift 3
  until "$@" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "start.sh: $name exited before $before; last log lines ($log):" >&2
      tail -n 30 "$log" >&2; rm -f "$pidfile"; exit 1
    fi
    if (( SECONDS - start >= timeout )); then
      echo "start.sh: $name not $not after ${timeout}s; stopping it. Last log lines ($log):" >&2
      tail -n 30 "$log" >&2; "$here/stop.sh" "$dir" >&2 || true; exit 1
    fi
    sleep 0.1
  done
}

# stop_pidfile NAME PIDFILE SECONDS [FILE...]: SIGTERM to the NAME process in PIDFILE, SIGKILL if
# it is still there after SECONDS; then removes PIDFILE and the FILEs, also if it was not running.
stop_pidfile() {
  local name=$1 pidfile=$2 seconds=$3 pid
  shift 3
  if [ ! -f "$pidfile" ]; then
    echo "stop.sh: no $pidfile; nothing to stop" >&2; return 0
  fi
  if ! running "$name" "$pidfile"; then
    echo "stop.sh: $name (pid $pid) is not running" >&2; rm -f "$pidfile" "$@"; return 0
  fi
  kill -TERM "$pid"
  for _ in $(seq $((seconds * 10))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "stop.sh: $name (pid $pid) ignored SIGTERM for ${seconds}s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile" "$@"
  echo "stop.sh: stopped $name (pid $pid)" >&2
}
