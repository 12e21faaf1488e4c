#!/usr/bin/env bash
# A throwaway PostgreSQL server for the desk's tests: its own data folder under /tmp, a Unix socket
# only (no TCP port), trust authentication. As root it runs as the user nobody (PostgreSQL refuses root).
# Usage: pg_server.sh start|stop CONNINFO_FILE   (start writes the connection string to the file)
set -euo pipefail
action=$1 info=$2
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] && [ -x "$bin/initdb" ] || { echo "pg_server: no PostgreSQL server (Debian package postgresql; scripts/common.sh installs it)" >&2; exit 1; }
run=()
[ "$(id -u)" -eq 0 ] && run=(runuser -u nobody --)
case $action in
  start)
    if [ -f "$info.dir" ]; then "$0" stop "$info" || true; fi
    dir=$(mktemp -d /tmp/itera-desk-pg.XXXXXX)
    chmod 755 "$dir"
    [ "$(id -u)" -eq 0 ] && chown nobody "$dir"
    cd "$dir"
    "${run[@]}" "$bin/initdb" -D "$dir/data" -U desk --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; exit 1; }
    # fsync off: the tests kill the desk, not PostgreSQL; speed matters more here than power-loss safety.
    "${run[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses='' -k $dir -c fsync=off -c max_connections=200" start >/dev/null ||
      { cat "$dir/server.log" >&2; exit 1; }
    echo "host=$dir user=desk dbname=postgres" >"$info"
    echo "$dir" >"$info.dir"
    echo "pg_server: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on socket $dir"
    ;;
  stop)
    [ -f "$info.dir" ] || exit 0
    dir=$(cat "$info.dir")
    cd /tmp
    "${run[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$dir" "$info" "$info.dir"
    ;;
  *) echo "usage: pg_server.sh start|stop CONNINFO_FILE" >&2; exit 2 ;;
esac
