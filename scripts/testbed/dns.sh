#!/usr/bin/env bash
# The testbed's cluster DNS, a stand-in for CoreDNS: Debian's unbound serving
# cluster.local from the API server's Services and Endpoints, and pod names
# (a-b-c-d.NS.pod.cluster.local) by rule. The watcher that feeds it is
# testsupport/cluster_dns.py, run here in the background with the project's
# .venv (scripts/setup.sh makes it); it starts and stops unbound itself.
# Everything lives under one directory:
#   DIR/unbound.conf DIR/pod_records.py   unbound's private configuration and module
#   DIR/control.sock                      unbound-control's socket
#   DIR/unbound.log DIR/cluster-dns.log   the server's and the watcher's logs
#   DIR/cluster-dns.pid DIR/unbound.pid   their pids
#   DIR/ready                             ADDR:PORT, once the first records are served
#
# Usage:
#   dns.sh start DIR KUBECONFIG ADDR:PORT [DOMAIN]  start (or reuse) the server on
#                                  ADDR:PORT (UDP and TCP; ADDR must be local) for
#                                  DOMAIN (default cluster.local), fed through
#                                  KUBECONFIG (list/watch Services and Endpoints)
#   dns.sh stop DIR                stop the watcher and unbound, delete DIR (idempotent)
#   dns.sh status DIR              exit 0 when the server is running and ready
# Environment: PYKUBELET_DNS_READY_TIMEOUT (seconds, default 30).
set -euo pipefail

READY_TIMEOUT=${PYKUBELET_DNS_READY_TIMEOUT:-30}
STOP_TIMEOUT=15

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=daemon-lib.sh
source "$here/daemon-lib.sh"

log() { echo "dns.sh: $*" >&2; }
die() {
    log "error: $*"
    local file
    for file in cluster-dns.log unbound.log; do
        if [[ -n "${dir:-}" && -s "$dir/$file" ]]; then
            log "last lines of $dir/$file:"
            tail -n 15 "$dir/$file" >&2
        fi
    done
    exit 1
}

watcher_pid() { pid_from_file "$dir/cluster-dns.pid" "testsupport.cluster_dns --kubeconfig"; }

cmd_start() {
    local kubeconfig="${1:-}" listen="${2:-}" domain="${3:-cluster.local}" pid waited=0
    [[ -n "$kubeconfig" && -n "$listen" ]] || die "usage: dns.sh start DIR KUBECONFIG ADDR:PORT [DOMAIN]"
    [[ -f "$kubeconfig" ]] || die "no kubeconfig $kubeconfig"
    if pid="$(watcher_pid)"; then
        log "cluster DNS already running (pid $pid)"
        return
    fi
    command -v unbound >/dev/null || die "unbound missing; run scripts/testbed/install.sh"
    [[ -x "$repo/.venv/bin/python" ]] || die "$repo/.venv missing; run scripts/setup.sh"
    mkdir -p "$dir"
    chmod 0700 "$dir"
    rm -f "$dir/ready"
    kubeconfig="$(cd "$(dirname "$kubeconfig")" && pwd)/$(basename "$kubeconfig")"
    (
        cd "$repo"
        exec setsid "$repo/.venv/bin/python" -m testsupport.cluster_dns \
            --kubeconfig "$kubeconfig" --listen "$listen" --dir "$dir" --domain "$domain"
    ) </dev/null >>"$dir/cluster-dns.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/cluster-dns.pid"
    until [[ -s "$dir/ready" ]]; do
        process_running "$pid" || die "the cluster DNS exited during start-up"
        ((waited++ < READY_TIMEOUT * 10)) || { cmd_stop_processes; die "not ready after ${READY_TIMEOUT}s"; }
        sleep 0.1
    done
    log "cluster DNS ready on $(cat "$dir/ready")"
}

# SIGTERM to the watcher stops unbound too; SIGKILL after STOP_TIMEOUT, then unbound
# (its pid file names it) if the watcher could not stop it.
cmd_stop_processes() {
    local pid waited=0
    if pid="$(watcher_pid)"; then
        kill -TERM "$pid" 2>/dev/null || true
        while process_running "$pid"; do
            if ((waited++ >= STOP_TIMEOUT * 10)); then
                kill -KILL "$pid" 2>/dev/null || true
            fi
            sleep 0.1
        done
    fi
    if pid="$(pid_from_file "$dir/unbound.pid" "$dir/unbound.conf")"; then
        kill -KILL "$pid" 2>/dev/null || true
        while process_running "$pid"; do sleep 0.1; done
    fi
}

cmd_stop() {
    [[ -e "$dir" ]] || return 0
    cmd_stop_processes
    rm -rf "$dir"
}

cmd_status() {
    local pid
    pid="$(watcher_pid)" || { echo "stopped"; return 1; }
    [[ -s "$dir/ready" ]] || { echo "starting (pid $pid)"; return 1; }
    echo "running (pid $pid) on $(cat "$dir/ready")"
}

main() {
    [[ $EUID -eq 0 ]] || { echo "dns.sh: must run as root" >&2; exit 1; }
    local command="${1:-}"
    [[ -n "${2:-}" ]] || command=usage
    dir="$(absolute_dir "${2:-.}")"
    refuse_system_dir "$dir"
    case "$command" in
        start) cmd_start "${3:-}" "${4:-}" "${5:-}" ;;
        stop) cmd_stop ;;
        status) cmd_status ;;
        *)
            usage_from_header "${BASH_SOURCE[0]}"
            ;;
    esac
}

main "$@"
