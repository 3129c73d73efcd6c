#!/usr/bin/env bash
# Test hosts: several "machines" on this one, each a network namespace with an
# address of its own, for a multi-node cluster (run-cluster.sh --nodes N, the
# multi-node tests). A node's containerd and kubelet run in its namespace
# (nsenter --net, so they keep the host's mount namespace); its pods get
# addresses from the node's own pod CIDR.
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
#   nodehost.sh create NAME INDEX   namespace pykn-NAME, node IP 10.89.0.(10+INDEX), pod
#                                   CIDR 10.244.INDEX.0/24 (INDEX 1..200); idempotent;
#                                   prints the node's facts (as env prints them)
#   nodehost.sh env NAME            print an existing node's facts, KEY=VALUE:
#                                   NODE_NAME NODE_INDEX NODE_NETNS NODE_NETNS_PATH
#                                   NODE_IP POD_CIDR POD_GATEWAY HOST_ADDRESS
#   nodehost.sh delete NAME         kill what still runs in the namespace, remove it and
#                                   the routes to its pods; the last node out removes the
#                                   switch and pyknodes0 (idempotent, crash-safe: found
#                                   by name)
#   nodehost.sh delete-all          delete every node and the switch
#   nodehost.sh status              one line per node: NAME INDEX NODE_IP POD_CIDR
# Environment: PYKUBELET_NODEHOST_NET (default 10.89.0: the first three octets of the
#   cluster /24), PYKUBELET_NODEHOST_PODS (default 10.244: the first two octets of the
#   pod CIDRs).
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

print_env() {
    local name="$1" index="$2"
    cat <<EOF
NODE_NAME=$name
NODE_INDEX=$index
NODE_NETNS=$NODE_PREFIX$name
NODE_NETNS_PATH=/run/netns/$NODE_PREFIX$name
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
    prune_routes
    remove_switch_if_unused
}

cmd_delete_all() {
    local name
    for name in $(node_names); do
        cmd_delete "$name"
    done
    remove_switch_if_unused
}

cmd_status() {
    local name index
    for name in $(node_names); do
        index="$(node_index "$name")" || { echo "$name ? ? ?"; continue; }
        echo "$name $index $(node_ip "$index") $(pod_cidr "$index")"
    done
}

main() {
    [[ $EUID -eq 0 ]] || die "must run as root"
    local command="${1:-}"
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
