# Sourced by scripts/bench-*.sh: the tools they need, a work directory
# removed on exit (with every server whose pid file is in it stopped), free
# ports, and the origin: nginx (1 worker) serving a 1 KiB /item.json and
# /p/item.json, with the same file as /cat/item.json in "$work/static".

# bench_tools TOOL...: installs the missing ones (Debian packages) with apt.
bench_tools() {
  local missing=() tool
  for tool in "$@"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  local packages=() SUDO="" own_policy=""
  for tool in "${missing[@]}"; do case $tool in
    nginx) packages+=(nginx-light) ;;
    callgrind_annotate | callgrind_control) packages+=(valgrind) ;;
    redis-cli | redis-benchmark) packages+=(redis-tools) ;;
    pgbench | psql) packages+=(postgresql-client) ;;
    *) packages+=("$tool") ;;
  esac; done
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # The nginx package would start a server on :80; a policy-rc.d that
  # refuses every start is in place while apt runs.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d; own_policy=1
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  [ -z "$own_policy" ] || $SUDO rm -f /usr/sbin/policy-rc.d
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

bench_cleanup() {
  local f
  for f in "$work"/*.pid; do [ -e "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

# bench_origin: sets $work (removed on exit) and $ORIGIN, starts the origin.
bench_origin() {
  command -v python3 >/dev/null || { echo "python3 is needed (free ports, JSON)" >&2; exit 1; }
  work=$(mktemp -d); chmod 755 "$work"   # nginx workers read it as www-data
  trap bench_cleanup EXIT
  ORIGIN=$(free_port)
  mkdir -p "$work/www/p" "$work/static/cat" "$work/empty"
  head -c 1024 /dev/zero | tr '\0' 'x' > "$work/www/item.json"
  cp "$work/www/item.json" "$work/www/p/item.json"
  cp "$work/www/item.json" "$work/static/cat/item.json"
  chmod -R 755 "$work/www" "$work/static"
  cat > "$work/origin.conf" <<CONF
worker_processes 1; daemon on; pid $work/origin.pid; error_log $work/origin.err;
events { worker_connections 4096; }
http { access_log off; server { listen 127.0.0.1:$ORIGIN; root $work/www; } }
CONF
  nginx -c "$work/origin.conf"
}

# json KEY: the member KEY of the JSON object on stdin ("" when absent).
json() { python3 -c "import json,sys; print(json.load(sys.stdin).get(sys.argv[1],''))" "$1"; }

# bench_join URL ROOM: a new ticket. A fleet room answers 503 for its
# first 2 s (its warm-up): asked again, up to 10 s.
bench_join() {
  local body _
  for _ in $(seq 50); do
    body=$(curl -sf -X POST "$1/queue/$2/join") && { json ticket <<<"$body"; return 0; }
    sleep 0.2
  done
  echo "no ticket from room $2" >&2; exit 1
}

# bench_pass GATEWAY-URL ROOM: joins ROOM and polls until released; prints the pass.
bench_pass() {
  local ticket pass="" _
  ticket=$(bench_join "$1" "$2")
  for _ in $(seq 100); do
    pass=$(curl -s -H "Authorization: Bearer $ticket" "$1/queue/$2/status" | json pass)
    [ -n "$pass" ] && break; sleep 0.5
  done
  [ -n "$pass" ] || { echo "no pass from room $2" >&2; exit 1; }
  echo "$pass"
}
