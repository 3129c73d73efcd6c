#!/usr/bin/env bash
# Test hosts: several "machines" on this one, each a network namespace with an
# address of its own and a mount namespace of its own, for a multi-node cluster
# (run-cluster.sh --nodes N, the multi-node tests, kubeadm-try.sh). A node's
# containerd and kubelet run in both (`nodehost.sh exec NAME -- CMD`); its pods
# get addresses from the node's own pod CIDR.
#
# The mount namespace is the machine's as it was when the node was made, but for
# the fixed paths a kubelet (the Go 1.20 one, kubeadm) insists on, which are the
# node's own there:
#   /var/log/pods /var/log/containers /var/lib/kubelet /var/lib/etcd /var/lib/cni
#       bind mounts of DIR/NAME/bind_var_log_pods, ... (/var/lib/cni: libcni's
#       result cache, which kubeadm reset empties);
#   /etc /usr/libexec
#       overlays on the machine's, their writes going to DIR/NAME/upper_etc, ...
#       (/etc/kubernetes is made there, and kube-controller-manager's
#       DirectoryOrCreate /usr/libexec/kubernetes/...).
# It is held by a bind mount of its namespace file, DIR/NAME/mountns (DIR a private
# bind mount of itself while any node exists, which a namespace file needs), not by
# a process; its mounts are private, so nothing done in it reaches the machine.
# Mounts made in it (a kubelet's volumes, containerd's snapshots) go with it.
#
# Topology (everything below is made by this script and removed by it):
#
#   host: pyknodes0 10.89.0.1/24 -- routes 10.244.I.0/24 via 10.89.0.(10+I)
#     | veth
#   namespace pyknet: bridge br0 (the cluster "switch"), one port per node
#     | veth
#   namespace pykn-NAME: eth0 10.89.0.(10+I)/24, lo, ip_forward=1, routes to
#     the other nodes' pod CIDRs via their node IPs; the node's containerd adds
#     its pod bridge (10.244.I.1/24) here.
#
# The switch is a bridge in a namespace of its own, not on the host: on a host
# bridge, bridged frames go through the host's iptables when br_netfilter is
# loaded, and a FORWARD policy of DROP (Docker's) would cut the nodes apart.
# The host takes part as one more port, so the host (and an API server bound
# to its address there) reaches node IPs and pod IPs (webhooks, the
# aggregator's pod-IP routing), and nodes and pods reach it, without host
# forwarding, host iptables rules or host sysctls. The host's pod routes are
# on pyknodes0 and go with it.
#
# Usage:
#   nodehost.sh create NAME INDEX   namespaces pykn-NAME and DIR/NAME/mountns, node IP
#                                   10.89.0.(10+INDEX), pod CIDR 10.244.INDEX.0/24
#                                   (INDEX 1..200); idempotent; prints the node's facts
#                                   (as env prints them)
#   nodehost.sh env NAME            print an existing node's facts, KEY=VALUE:
#                                   NODE_NAME NODE_INDEX NODE_NETNS NODE_NETNS_PATH
#                                   NODE_MOUNTNS_PATH NODE_DIR NODE_IP POD_CIDR
#                                   POD_GATEWAY HOST_ADDRESS (NODE_MOUNTNS_PATH empty for
#                                   a node made before mount namespaces)
#   nodehost.sh exec NAME -- CMD... run CMD in the node's mount and network namespaces (in
#                                   the working directory it is run in)
#   nodehost.sh delete NAME         kill what still runs in its namespaces, remove them,
#                                   DIR/NAME and the routes to its pods; the last node
#                                   out removes the switch and pyknodes0 (idempotent,
#                                   crash-safe: found by name)
#   nodehost.sh delete-all          delete every node and the switch
#   nodehost.sh status              one line per node: NAME INDEX NODE_IP POD_CIDR MOUNTNS
#                                   (MOUNTNS the namespace file, or "-" when it has none)
# Environment: PYKUBELET_NODEHOST_NET (default 10.89.0: the first three octets of the
#   cluster /24), PYKUBELET_NODEHOST_PODS (default 10.244: the first two octets of the
#   pod CIDRs), PYKUBELET_NODEHOST_DIR (DIR, default /tmp/pykn: the nodes' mount
#   namespaces and the directories bound or overlaid in them).
set -euo pipefail

NET=${PYKUBELET_NODEHOST_NET:-10.89.0}
PODS=${PYKUBELET_NODEHOST_PODS:-10.244}
HOST_ADDRESS=$NET.1
PREFIX_LEN=24
NODE_PREFIX=pykn-
SWITCH_NS=pyknet
SWITCH=br0
HOST_LINK=pyknodes0
MAX_INDEX=200
STOP_TIMEOUT=10
DIR=${PYKUBELET_NODEHOST_DIR:-/tmp/pykn}
# In a node's mount namespace: overlays on the machine's directories, and directories of
# the node's bound over the machine's.
OVERLAID=(/etc /usr/libexec)
BOUND=(/var/log/pods /var/log/containers /var/lib/kubelet /var/lib/etcd /var/lib/cni)

log() { echo "nodehost.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 2
}

node_ip() { echo "$NET.$((10 + $1))"; }
pod_cidr() { echo "$PODS.$1.0/24"; }

netns_exists() { [[ -e "/run/netns/$1" ]]; }

# The node namespaces there are, by name (without the prefix).
node_names() {
    local path
    for path in /run/netns/"$NODE_PREFIX"*; do
        [[ -e "$path" ]] && echo "${path#/run/netns/"$NODE_PREFIX"}"
    done
    return 0
}

# A node's index, read from the address of its eth0 (nothing is stored elsewhere, so a
# crashed run's nodes are found all the same); fails when it has none.
node_index() {
    local ns="$NODE_PREFIX$1" address
    netns_exists "$ns" || return 1
    address="$(ip -n "$ns" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}')"
    address="${address%/*}"
    [[ "$address" == "$NET".* ]] || return 1
    echo $(("${address##*.}" - 10))
}

# Routes the host has in PREFIX (or containing it) on an interface that is not ours:
# such a clash would make our addresses unreachable, or theirs.
route_clash() {
    local prefix="$1"
    {
        ip -4 route show root "$prefix"
        ip -4 route show match "$prefix"
    } | awk -v ours="$HOST_LINK" '$1 != "default" && $0 !~ (" dev " ours "( |$)")' | sort -u
}

ensure_switch() {
    local clash
    clash="$(route_clash "$NET.0/$PREFIX_LEN")"
    [[ -z "$clash" ]] || die "the host already routes $NET.0/$PREFIX_LEN elsewhere: $clash (set PYKUBELET_NODEHOST_NET)"
    if ! netns_exists "$SWITCH_NS"; then
        ip netns add "$SWITCH_NS"
    fi
    ip -n "$SWITCH_NS" link set lo up
    if ! ip -n "$SWITCH_NS" link show "$SWITCH" >/dev/null 2>&1; then
        ip -n "$SWITCH_NS" link add "$SWITCH" type bridge
    fi
    ip -n "$SWITCH_NS" link set "$SWITCH" up
    if ! ip link show "$HOST_LINK" >/dev/null 2>&1; then
        ip link add "$HOST_LINK" type veth peer name host netns "$SWITCH_NS"
    fi
    ip -n "$SWITCH_NS" link set host master "$SWITCH" up
    ip addr replace "$HOST_ADDRESS/$PREFIX_LEN" dev "$HOST_LINK"
    ip link set "$HOST_LINK" up
}

remove_switch_if_unused() {
    [[ -z "$(node_names)" ]] || return 0
    ip link delete "$HOST_LINK" 2>/dev/null || true
    if netns_exists "$SWITCH_NS"; then
        ip netns delete "$SWITCH_NS" 2>/dev/null || true
    fi
}

# Routes to pod CIDRs of nodes that are gone (a crashed run), on the host and in every
# node: each route via a gateway that no node has any more.
prune_routes() {
    local live=" " name index
    for name in $(node_names); do
        index="$(node_index "$name")" && live+="$(node_ip "$index") "
    done
    local where destination gateway
    for where in host $(node_names); do
        local ipcmd=(ip)
        [[ "$where" == host ]] || ipcmd=(ip -n "$NODE_PREFIX$where")
        if [[ "$where" == host ]] && ! ip link show "$HOST_LINK" >/dev/null 2>&1; then
            continue
        fi
        while read -r destination gateway; do
            [[ "$live" == *" $gateway "* ]] && continue
            "${ipcmd[@]}" route delete "$destination" via "$gateway" 2>/dev/null || true
        done < <("${ipcmd[@]}" -4 route show | awk -v pods="$PODS." -v net="$NET." \
            'index($1, pods) == 1 && $2 == "via" && index($3, net) == 1 { print $1, $3 }')
    done
}

# Routes so that every pod CIDR is reached through its node: from the host and from
# every other node.
ensure_routes() {
    local name index other other_index
    for name in $(node_names); do
        index="$(node_index "$name")" || continue
        ip route replace "$(pod_cidr "$index")" via "$(node_ip "$index")" dev "$HOST_LINK"
        for other in $(node_names); do
            [[ "$other" == "$name" ]] && continue
            other_index="$(node_index "$other")" || continue
            ip -n "$NODE_PREFIX$other" route replace "$(pod_cidr "$index")" \
                via "$(node_ip "$index")" dev eth0
        done
    done
}

# --- the nodes' mount namespaces ---------------------------------------------------------

mountns_file() { echo "$DIR/$1/mountns"; }

# Whether FILE holds a mount namespace (a bind mount of one: nsfs), not just the empty
# file it is bound over.
is_namespace_file() { [[ "$(stat -f -c %T "$1" 2>/dev/null || true)" == nsfs ]]; }

# DIR a private mount of its own: a namespace file may not be bound on a shared mount
# (and the machine's / may be shared, as on systemd hosts).
ensure_dir_mount() {
    mkdir -p "$DIR"
    mountpoint -q "$DIR" || mount --bind "$DIR" "$DIR"
    mount --make-private "$DIR"
}

# The machine's directories a node's namespace binds over, made (empty) where missing and
# listed in DIR/made-dirs, so that the last node out removes them again.
ensure_mount_point() {
    local dir="$1"
    [[ -d "$dir" ]] && return 0
    mkdir -p "$dir"
    echo "$dir" >>"$DIR/made-dirs"
    log "made the missing mount point $dir (removed with the last node)"
}

ensure_mountns() {
    local name="$1" file node_dir key dir
    file="$(mountns_file "$name")"
    is_namespace_file "$file" && return 0
    ensure_dir_mount
    node_dir="$DIR/$name"
    mkdir -p "$node_dir"
    local lines=("set -e")
    for dir in "${OVERLAID[@]}"; do
        key="${dir//\//_}"
        mkdir -p "$node_dir/upper$key" "$node_dir/work$key"
        lines+=("mount -t overlay overlay -o lowerdir=$dir,upperdir=$node_dir/upper$key,workdir=$node_dir/work$key $dir")
    done
    for dir in "${BOUND[@]}"; do
        key="${dir//\//_}"
        ensure_mount_point "$dir"
        if [[ ! -d "$node_dir/bind$key" ]]; then
            mkdir -p "$node_dir/bind$key"
            # Owned as the machine's (/var/lib/etcd: etcd, 0700).
            chown --reference="$dir" "$node_dir/bind$key"
            chmod --reference="$dir" "$node_dir/bind$key"
        fi
        lines+=("mount --bind $node_dir/bind$key $dir")
    done
    touch "$file"
    # The namespace lives on in the bind mount of its file once sh has exited.
    if ! unshare --mount="$file" --propagation private sh -c "$(printf '%s\n' "${lines[@]}")"; then
        umount "$file" 2>/dev/null || true
        die "could not make the mount namespace of node $name"
    fi
}

# The processes whose mount namespace is FILE's.
mountns_pids() {
    local inode proc
    inode="$(stat -c %i "$1")"
    for proc in /proc/[0-9]*; do
        [[ "$(readlink "$proc/ns/mnt" 2>/dev/null || true)" == "mnt:[$inode]" ]] \
            && echo "${proc#/proc/}"
    done
    return 0
}

# End what runs in node NAME's mount namespace, release the namespace (its mounts go with
# it) and remove the node's directory.
remove_mountns() {
    local name="$1" file pids waited=0
    file="$(mountns_file "$name")"
    if is_namespace_file "$file"; then
        pids="$(mountns_pids "$file")"
        if [[ -n "$pids" ]]; then
            log "ending $(wc -w <<<"$pids") process(es) still in the mount namespace of $name"
            # shellcheck disable=SC2086
            kill -TERM $pids 2>/dev/null || true
            while [[ -n "$(mountns_pids "$file")" ]]; do
                if ((waited++ >= STOP_TIMEOUT * 10)); then
                    # shellcheck disable=SC2046
                    kill -KILL $(mountns_pids "$file") 2>/dev/null || true
                    break
                fi
                sleep 0.1
            done
        fi
        umount "$file"
    fi
    if [[ -d "$DIR/$name" ]]; then
        # Nothing is mounted below on the machine's side; never cross into what would be.
        rm -rf --one-file-system "${DIR:?}/$name"
    fi
}

# Directories of nodes whose network namespace is gone (a crashed run).
prune_mountns() {
    local path name
    for path in "$DIR"/*/; do
        [[ -d "$path" ]] || continue
        name="$(basename "$path")"
        netns_exists "$NODE_PREFIX$name" || remove_mountns "$name"
    done
}

remove_dir_if_unused() {
    [[ -z "$(node_names)" && -d "$DIR" ]] || return 0
    prune_mountns
    local made
    if [[ -f "$DIR/made-dirs" ]]; then
        while read -r made; do
            rmdir "$made" 2>/dev/null || log "left $made (not empty)"
        done <"$DIR/made-dirs"
    fi
    if mountpoint -q "$DIR"; then
        umount "$DIR"
    fi
    rm -rf --one-file-system "$DIR"
}

print_env() {
    local name="$1" index="$2" mountns=""
    is_namespace_file "$(mountns_file "$name")" && mountns="$(mountns_file "$name")"
    cat <<EOF
NODE_NAME=$name
NODE_INDEX=$index
NODE_NETNS=$NODE_PREFIX$name
NODE_NETNS_PATH=/run/netns/$NODE_PREFIX$name
NODE_MOUNTNS_PATH=$mountns
NODE_DIR=$DIR/$name
NODE_IP=$(node_ip "$index")
POD_CIDR=$(pod_cidr "$index")
POD_GATEWAY=$PODS.$index.1
HOST_ADDRESS=$HOST_ADDRESS
EOF
}

valid_name() {
    [[ ${#1} -le 63 && "$1" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]]
}

cmd_create() {
    local name="$1" index="$2" ns="$NODE_PREFIX$1" other existing
    valid_name "$name" || die "node name '$name' is not a DNS-1123 label"
    [[ "$index" =~ ^[0-9]+$ ]] && ((index >= 1 && index <= MAX_INDEX)) \
        || die "INDEX must be 1..$MAX_INDEX, not '$index'"
    for other in $(node_names); do
        [[ "$other" == "$name" ]] && continue
        if [[ "$(node_index "$other" || true)" == "$index" ]]; then
            die "index $index is taken by node $other"
        fi
    done
    if existing="$(node_index "$name")" && [[ "$existing" != "$index" ]]; then
        die "node $name exists with index $existing"
    fi
    local clash
    clash="$(route_clash "$(pod_cidr "$index")")"
    [[ -z "$clash" ]] || die "the host already routes $(pod_cidr "$index") elsewhere: $clash"
    ensure_switch
    netns_exists "$ns" || ip netns add "$ns"
    ip -n "$ns" link set lo up
    if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
        # Both ends made where they belong: no name is ever taken on the host.
        ip link add eth0 netns "$ns" type veth peer name "node$index" netns "$SWITCH_NS"
    fi
    ip -n "$SWITCH_NS" link set "node$index" master "$SWITCH" up
    ip -n "$ns" addr replace "$(node_ip "$index")/$PREFIX_LEN" dev eth0
    ip -n "$ns" link set eth0 up
    # Inside the node only: its pods' traffic to other nodes passes through it.
    nsenter --net="/run/netns/$ns" sysctl -qw net.ipv4.ip_forward=1
    prune_routes
    ensure_routes
    prune_mountns
    ensure_mountns "$name"
    print_env "$name" "$index"
}

cmd_env() {
    local index
    index="$(node_index "$1")" || die "no node $1"
    print_env "$1" "$index"
}

# Processes still in the namespace keep it alive after "ip netns delete", with
# whatever they hold: a node's leftovers are ended with it.
kill_namespace_processes() {
    local ns="$1" pids waited=0
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    [[ -n "$pids" ]] || return 0
    log "ending $(wc -w <<<"$pids") process(es) still in $ns"
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    while [[ -n "$(ip netns pids "$ns" 2>/dev/null || true)" ]]; do
        if ((waited++ >= STOP_TIMEOUT * 10)); then
            # shellcheck disable=SC2046
            kill -KILL $(ip netns pids "$ns" 2>/dev/null || true) 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
}

cmd_delete() {
    local name="$1" ns="$NODE_PREFIX$1"
    if netns_exists "$ns"; then
        kill_namespace_processes "$ns"
        ip netns delete "$ns"
    fi
    remove_mountns "$name"
    prune_routes
    remove_switch_if_unused
    remove_dir_if_unused
}

# Usage: cmd_exec NAME CMD...: CMD in the node's mount and network namespaces.
cmd_exec() {
    local name="$1" file
    shift
    netns_exists "$NODE_PREFIX$name" || die "no node $name"
    file="$(mountns_file "$name")"
    is_namespace_file "$file" || die "node $name has no mount namespace (made by an older nodehost.sh?)"
    # Entering a mount namespace moves to its root: the working directory kept.
    exec nsenter --mount="$file" --net="/run/netns/$NODE_PREFIX$name" --wd="$PWD" -- "$@"
}

cmd_delete_all() {
    local name
    for name in $(node_names); do
        cmd_delete "$name"
    done
    remove_switch_if_unused
    remove_dir_if_unused
}

cmd_status() {
    local name index mountns
    for name in $(node_names); do
        mountns="$(mountns_file "$name")"
        is_namespace_file "$mountns" || mountns=-
        index="$(node_index "$name")" || { echo "$name ? ? ? $mountns"; continue; }
        echo "$name $index $(node_ip "$index") $(pod_cidr "$index") $mountns"
    done
}

main() {
    [[ $EUID -eq 0 ]] || die "must run as root"
    local command="${1:-}"
    if [[ "$command" == exec ]]; then
        # Not under the lock below: CMD may run for as long as the node.
        [[ $# -ge 4 && "$3" == -- ]] || usage
        local name="$2"
        shift 3
        cmd_exec "$name" "$@"
    fi
    # One change at a time (routes are written across all nodes): a lock on this file.
    exec 9<"${BASH_SOURCE[0]}"
    flock 9
    case "$command" in
        create) [[ $# -eq 3 ]] || usage; cmd_create "$2" "$3" ;;
        env) [[ $# -eq 2 ]] || usage; cmd_env "$2" ;;
        delete) [[ $# -eq 2 ]] || usage; cmd_delete "$2" ;;
        delete-all) [[ $# -eq 1 ]] || usage; cmd_delete_all ;;
        status) [[ $# -eq 1 ]] || usage; cmd_status ;;
        *) usage ;;
    esac
}

main "$@"
