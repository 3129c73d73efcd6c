#!/usr/bin/env bash
# A throw-away containerd 1.6 (CRI v1) for pykubelet's integration tests.
#
# Everything the daemon owns lives under one directory so that test runs never
# touch the host's containerd and a crashed run can be wiped completely:
#   DIR/config.toml  DIR/containerd.sock  DIR/containerd.log  DIR/containerd.pid
#   DIR/root  DIR/state (incl. runc state and pod network namespaces)
#   DIR/cni/net.d (CNI config)  DIR/certs.d (registry hosts, see registry.sh)  DIR/env
# Exception: all testbeds share one pod network (bridge pykcni0, 10.88.0.0/16)
# and therefore one host-local lease store, /var/lib/cni/networks/pykubelet,
# whose file lock keeps concurrent testbeds from handing out the same IP.
# DIR must stay short: the socket path is limited to 108 bytes.
#
# A testbed of a test host (nodehost.sh) runs in the node's network namespace
# with a pod network of its own: start's --netns PATH runs the daemon (and so
# its shims, CNI plugins and hostNetwork pods) under "nsenter --net=PATH",
# keeping the caller's mount namespace (where the kubelet's volume mounts are),
# unless --mountns says otherwise (below);
# --pod-subnet CIDR gives its pods that subnet (bridge pykcni0 in that
# namespace, the gateway the subnet's first address) with the leases under
# DIR/cni/ipam. --mountns FILE (the node's NODE_MOUNTNS_PATH) runs the daemon, and
# this script's every later command, in that mount namespace too, so that the
# container log paths the kubelet gives (the Go kubelet's fixed /var/log/pods)
# are those of the node's kubelet, which runs there, and the mounts the daemon
# makes (snapshots, pod network namespaces) stay in there. All three are kept in
# DIR/network for later commands.
#
# Usage:
#   containerd.sh start [DIR] [--netns PATH] [--pod-subnet CIDR] [--mountns FILE]
#                                    start (or reuse) the daemon, import the test images,
#                                    write DIR/env; on an existing root it re-attaches
#                                    to running shims
#   containerd.sh stop-daemon [DIR]  stop only the daemon; shims and containers keep running
#   containerd.sh stop [DIR]         remove every pod and container, stop everything,
#                                    unmount and delete DIR (idempotent, crash-safe)
#   containerd.sh status [DIR]       exit 0 when the daemon is running
#   containerd.sh import DIR ARCHIVE...  import more OCI image archives into the
#                                    running daemon (under the names they carry)
# Environment: PYKUBELET_IMAGES_DIR (default /tmp/pykubelet-images) caches image archives.
set -euo pipefail

PAUSE_IMAGE="pykubelet.local/pause:3.9"
BUSYBOX_IMAGE="pykubelet.local/busybox:1.35"
DEFAULT_DIR=/tmp/pykubelet-testbed
CNI_BIN_DIR=/usr/lib/cni
CNI_BRIDGE=pykcni0
CNI_SUBNET=10.88.0.0/16
CNI_NETWORK=pykubelet
CNI_LEASE_DIR=/var/lib/cni/networks/$CNI_NETWORK
# The network namespace the daemon runs in (a path; empty: the caller's), see above.
netns=""
# The mount namespace (a namespace file; empty: the caller's) the script and daemon run in.
mountns=""
READY_TIMEOUT=${PYKUBELET_TESTBED_READY_TIMEOUT:-60}
STOP_TIMEOUT=20

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=daemon-lib.sh
source "$here/daemon-lib.sh"
images_dir="${PYKUBELET_IMAGES_DIR:-/tmp/pykubelet-images}"

log() { echo "containerd.sh: $*" >&2; }
die() {
    log "error: $*"
    if [[ -n "${dir:-}" && -s "$dir/containerd.log" ]]; then
        # Start-up chatter is level=info; the reason is a warning, an error or
        # a bare line containerd prints when it gives up.
        local reasons
        # || true: a grep that finds nothing would otherwise end die() before it prints.
        reasons="$(tail -n 300 "$dir/containerd.log" | grep -vE 'level=(info|debug)' | tail -n 15)" || true
        log "last lines of $dir/containerd.log:"
        echo "${reasons:-$(tail -n 15 "$dir/containerd.log")}" >&2
    fi
    exit 1
}

daemon_pid() { pid_from_file "$dir/containerd.pid" "--config $dir/config.toml"; }


choose_snapshotter() {
    # Reuse the earlier choice: snapshots on an existing root only make sense
    # to the snapshotter that created them.
    if [[ -s "$dir/snapshotter" ]]; then
        cat "$dir/snapshotter"
        return
    fi
    local probe="$dir/overlay-probe" choice=native
    mkdir -p "$probe"/{lower,upper,work,merged}
    echo ok >"$probe/lower/file"
    if mount -t overlay overlay \
        -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
        "$probe/merged" 2>/dev/null; then
        if [[ "$(cat "$probe/merged/file" 2>/dev/null)" == ok ]] \
            && touch "$probe/merged/written" 2>/dev/null; then
            choice=overlayfs
        fi
        umount "$probe/merged" || umount -l "$probe/merged"
    fi
    rm -rf "$probe"
    echo "$choice" >"$dir/snapshotter"
    echo "$choice"
}

write_config() {
    local snapshotter="$1"
    mkdir -p "$dir/root" "$dir/state" "$dir/opt" "$dir/cni/net.d" "$dir/certs.d"
    cat >"$dir/config.toml" <<EOF
# Generated by scripts/testbed/containerd.sh; rewritten on every start.
version = 2
root = "$dir/root"
state = "$dir/state"
# Snapshotters this machine cannot use only add noise to the log.
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "$dir/containerd.sock"

[ttrpc]
  address = "$dir/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This machine lacks CAP_SYS_RESOURCE: never ask for a lower oom_score_adj.
  restrict_oom_score_adj = true
  # Port 0 lets several testbeds (and a host containerd) coexist.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # Pod network namespaces under DIR/state, so stop can always find them.
  netns_mounts_under_state_dir = true
  enable_selinux = false
  tolerate_missing_hugetlb_controller = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$snapshotter"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        # runc's own state, by default /run/containerd/runc, kept inside DIR.
        Root = "$dir/state/runc"
        SystemdCgroup = false

  # Registry hosts (hosts.toml per registry, read on every pull): the testbed
  # registry (registry.sh trust) puts its CA there.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$dir/certs.d"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$dir/cni/net.d"
    max_conf_num = 1
EOF
    cat >"$dir/cni/net.d/10-pykubelet.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "promiscMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$CNI_SUBNET"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "${CNI_LEASE_DIR%/*}"
      }
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    }
  ]
}
EOF
    # The CRI plugin brings up "lo" itself; this file completes the usual
    # layout for tools that read the directory (max_conf_num = 1 ignores it).
    cat >"$dir/cni/net.d/99-loopback.conf" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK-lo",
  "type": "loopback"
}
EOF
}

write_env() {
    cat >"$dir/env.partial" <<EOF
CONTAINERD_ENDPOINT=unix://$dir/containerd.sock
PAUSE_IMAGE=$PAUSE_IMAGE
BUSYBOX_IMAGE=$BUSYBOX_IMAGE
EOF
    mv "$dir/env.partial" "$dir/env"
}

start_daemon() {
    local pid waited=0
    if pid="$(daemon_pid)"; then
        log "containerd already running (pid $pid)"
        return
    fi
    local snapshotter
    snapshotter="$(choose_snapshotter)"
    write_config "$snapshotter"
    rm -f "$dir/containerd.sock" "$dir/containerd.sock.ttrpc"
    if [[ -n "$netns" && ! -e "$netns" ]]; then
        log "error: no network namespace $netns"
        exit 1
    fi
    echo "=== start $(date -u +%FT%TZ) snapshotter=$snapshotter" >>"$dir/containerd.log"
    # setsid: the daemon must not get the caller's Ctrl-C or die with its session.
    setsid ${netns:+nsenter --net="$netns"} containerd --config "$dir/config.toml" \
        </dev/null >>"$dir/containerd.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/containerd.pid"
    while [[ ! -S "$dir/containerd.sock" ]]; do
        process_running "$pid" || die "containerd exited during start-up"
        ((waited++ < READY_TIMEOUT * 10)) || die "no socket after ${READY_TIMEOUT}s"
        sleep 0.1
    done
    process_running "$pid" || die "containerd exited during start-up"
    python3 "$here/cri_tool.py" wait-ready "$dir/containerd.sock" "$READY_TIMEOUT" >&2 \
        || die "CRI plugin did not become ready"
}

# Usage: import_archive ARCHIVE: into the CRI's namespace, on the daemon's snapshotter.
import_archive() {
    ctr -a "$dir/containerd.sock" -n k8s.io images import \
        --snapshotter "$(cat "$dir/snapshotter")" "$1" >/dev/null \
        || die "importing $1 failed"
}

import_images() {
    local have
    have="$(ctr -a "$dir/containerd.sock" -n k8s.io images ls -q)"
    local name archive
    for name in "$PAUSE_IMAGE" "$BUSYBOX_IMAGE"; do
        if grep -qxF "$name" <<<"$have"; then
            continue
        fi
        case "$name" in
            "$PAUSE_IMAGE") archive="$images_dir/pause.tar" ;;
            *) archive="$images_dir/busybox.tar" ;;
        esac
        import_archive "$archive"
    done
    python3 "$here/cri_tool.py" wait-images "$dir/containerd.sock" 15 \
        "$PAUSE_IMAGE" "$BUSYBOX_IMAGE" || die "imported images not visible through CRI"
}

cmd_import() {
    process_running "$(daemon_pid)" || die "no containerd running in $dir"
    local archive
    for archive in "$@"; do
        [[ -f "$archive" ]] || die "no archive $archive"
        import_archive "$archive"
    done
}

cmd_start() {
    [[ ${#dir} -le 80 ]] || die "DIR $dir is too long for a unix socket path (keep it <= 80)"
    command -v containerd >/dev/null || die "containerd missing; run scripts/testbed/install.sh"
    command -v runc >/dev/null || die "runc missing; run scripts/testbed/install.sh"
    [[ -x "$CNI_BIN_DIR/bridge" ]] || die "CNI plugins missing in $CNI_BIN_DIR"
    mkdir -p "$dir"
    "$here/build-images.sh" "$images_dir" >&2 || die "building test images failed"
    start_daemon
    import_images
    write_env
    log "containerd ready at unix://$dir/containerd.sock"
}

# Usage: stop_daemon_process SIGNAL
stop_daemon_process() {
    local signal="$1" pid waited=0
    pid="$(daemon_pid)" || { rm -f "$dir/containerd.pid"; return 0; }
    kill "-$signal" "$pid" 2>/dev/null || true
    while process_running "$pid"; do
        if ((waited++ >= STOP_TIMEOUT * 10)); then
            log "containerd (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        sleep 0.1
    done
    rm -f "$dir/containerd.pid"
}

cmd_stop_daemon() { stop_daemon_process TERM; }

shim_pids() {
    local proc cmdline
    for proc in /proc/[0-9]*; do
        cmdline="$(tr '\0' ' ' 2>/dev/null <"$proc/cmdline")" || continue
        if [[ "$cmdline" == *containerd-shim* && "$cmdline" == *"-address $dir/containerd.sock "* ]]; then
            echo "${proc#/proc/}"
        fi
    done
}

kill_leftover_containers() {
    # runc's state is under DIR/state/runc/<namespace>; anything still listed
    # there outlived the runtime and is killed the hard way.
    local ns_root id
    for ns_root in "$dir"/state/runc/*/; do
        [[ -d "$ns_root" ]] || continue
        for id in $(runc --root "$ns_root" list -q 2>/dev/null); do
            runc --root "$ns_root" kill --all "$id" KILL 2>/dev/null || true
            runc --root "$ns_root" delete --force "$id" 2>/dev/null || true
            release_cni_state "$id"
        done
    done
    local pid
    for pid in $(shim_pids); do
        kill -KILL "$pid" 2>/dev/null || true
    done
}

# Without a CNI DEL, the IP lease (a file naming the container) and libcni's
# cached results (ours and the CRI's own loopback network) outlive the sandbox.
release_cni_state() {
    local id="$1" lease
    rm -f /var/lib/cni/results/*-"$id"-* 2>/dev/null || true
    [[ -d "$CNI_LEASE_DIR" ]] || return 0
    for lease in $(grep -lF "$id" "$CNI_LEASE_DIR"/* 2>/dev/null); do
        rm -f "$lease"
    done
}

unmount_all_under_dir() {
    local mountpoint
    # mountinfo lists parents before children; unmount in reverse.
    while read -r mountpoint; do
        umount "$mountpoint" 2>/dev/null || umount -l "$mountpoint" 2>/dev/null \
            || log "could not unmount $mountpoint"
    done < <(awk -v prefix="$dir/" 'index($5, prefix) == 1 { print $5 }' /proc/self/mountinfo \
        | tac)
}

remove_bridge_if_unused() {
    if [[ -n "$netns" ]]; then
        # The node's own bridge, in its namespace (gone already with the namespace).
        [[ -e "$netns" ]] || return 0
        if [[ -z "$(nsenter --net="$netns" ip -o link show master "$CNI_BRIDGE" 2>/dev/null)" ]]; then
            nsenter --net="$netns" ip link delete "$CNI_BRIDGE" 2>/dev/null || true
        fi
        return 0
    fi
    # Several testbeds share the bridge; only the last one out removes it.
    if [[ -d "/sys/class/net/$CNI_BRIDGE" ]] \
        && [[ -z "$(ls -A "/sys/class/net/$CNI_BRIDGE/brif" 2>/dev/null)" ]]; then
        ip link delete "$CNI_BRIDGE" 2>/dev/null || true
    fi
}

cmd_stop() {
    [[ -e "$dir" ]] || { remove_bridge_if_unused; return 0; }
    # After a crash the daemon may be gone: bring it back so that pods are torn
    # down through CRI (that is what runs CNI DEL), unless it cannot start.
    if ! daemon_pid >/dev/null && [[ -s "$dir/config.toml" && -d "$dir/root" ]]; then
        (READY_TIMEOUT=15; start_daemon) || log "could not restart containerd for cleanup"
    fi
    if daemon_pid >/dev/null; then
        python3 "$here/cri_tool.py" remove-all "$dir/containerd.sock" >&2 \
            || log "some pods could not be removed through CRI; killing them"
    fi
    # Its root is deleted next, so a graceful shutdown (over a second) buys nothing.
    stop_daemon_process KILL
    kill_leftover_containers
    unmount_all_under_dir
    rm -rf "$dir"
    # runc's parent cgroup for pods without a cgroup parent; rmdir only
    # succeeds once no testbed uses it.
    rmdir /sys/fs/cgroup/*/k8s.io 2>/dev/null || true
    remove_bridge_if_unused
}

# Usage: network_options [--netns PATH] [--pod-subnet CIDR] [--mountns FILE] (start's
# options): set netns, mountns, CNI_SUBNET and CNI_LEASE_DIR from them, or from
# DIR/network when none are given, and record them there. Without any, and no
# DIR/network, the defaults stay.
network_options() {
    local given_netns="" given_subnet="" given_mountns="" record=0
    [[ $# -eq 0 ]] || record=1
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --netns) [[ $# -ge 2 ]] || die "--netns needs a path"; given_netns="$2"; shift 2 ;;
            --pod-subnet) [[ $# -ge 2 ]] || die "--pod-subnet needs a CIDR"; given_subnet="$2"; shift 2 ;;
            --mountns) [[ $# -ge 2 ]] || die "--mountns needs a file"; given_mountns="$2"; shift 2 ;;
            *) die "unknown option $1" ;;
        esac
    done
    if [[ -z "$given_netns$given_subnet$given_mountns" && -s "$dir/network" ]]; then
        given_netns="$(sed -n 's/^NETNS=//p' "$dir/network")"
        given_subnet="$(sed -n 's/^POD_SUBNET=//p' "$dir/network")"
        given_mountns="$(sed -n 's/^MOUNTNS=//p' "$dir/network")"
    fi
    [[ -n "$given_netns$given_subnet$given_mountns" ]] || return 0
    netns="$given_netns"
    mountns="$given_mountns"
    if [[ -n "$given_subnet" ]]; then
        [[ "$given_subnet" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+/[0-9]+$ ]] \
            || die "--pod-subnet $given_subnet is not an IPv4 CIDR"
        CNI_SUBNET="$given_subnet"
        CNI_LEASE_DIR="$dir/cni/ipam/$CNI_NETWORK"
    fi
    if [[ "$record" == 1 ]]; then
        mkdir -p "$dir"
        printf 'NETNS=%s\nPOD_SUBNET=%s\nMOUNTNS=%s\n' "$netns" "$given_subnet" "$mountns" \
            >"$dir/network"
    fi
}

# Usage: enter_mountns ARGS...: run this script again with ARGS (the ones it was given)
# in the mount namespace of --mountns, unless it runs there already. Seen from inside,
# the namespace file is the plain file it is bound over; once the node is gone, no
# namespace file is left either: then the script goes on where it is (nothing of the
# namespace's mounts is left to undo), but start refuses.
enter_mountns() {
    [[ -n "$mountns" && -z "${PYKUBELET_CONTAINERD_MOUNTNS:-}" ]] || return 0
    if [[ "$(stat -f -c %T "$mountns" 2>/dev/null || true)" == nsfs ]]; then
        # Entering a mount namespace moves to its root: the working directory kept.
        PYKUBELET_CONTAINERD_MOUNTNS="$mountns" exec nsenter --mount="$mountns" --wd="$PWD" -- \
            bash "$here/$(basename "${BASH_SOURCE[0]}")" "$@"
    fi
    [[ "${1:-}" != start ]] || die "no mount namespace $mountns"
}

cmd_status() {
    local pid
    pid="$(daemon_pid)" || { echo "stopped"; return 1; }
    echo "running (pid $pid)"
}

main() {
    [[ $EUID -eq 0 ]] || { echo "containerd.sh: must run as root" >&2; exit 1; }
    local command="${1:-}"
    local args=("$@")
    dir="$(absolute_dir "${2:-$DEFAULT_DIR}")"
    refuse_system_dir "$dir"
    case "$command" in
        start) shift "$(($# < 2 ? $# : 2))"; network_options "$@"; enter_mountns "${args[@]}"
               cmd_start ;;
        stop-daemon) network_options; enter_mountns "${args[@]}"; cmd_stop_daemon ;;
        stop) network_options; enter_mountns "${args[@]}"; cmd_stop ;;
        status) network_options; cmd_status ;;
        import) shift 2; cmd_import "$@" ;;
        *)
            usage_from_header "${BASH_SOURCE[0]}"
            ;;
    esac
}

main "$@"
