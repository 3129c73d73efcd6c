#!/usr/bin/env bash
# Try `kubeadm init` (v1.20.2, built with the control plane) on a test host
# with pykubelet as the kubelet, the machine's own paths never written.
#
# What it makes, all removed by `down`:
#   - test host NAME (nodehost.sh, node IP 10.89.0.(10+INDEX)): its network
#     namespace pykn-NAME and its mount namespace, where /etc and /usr/libexec
#     are overlays whose writes go to the node's directory (/etc/kubernetes
#     does not exist on the machine, and the controller manager's
#     DirectoryOrCreate volume /usr/libexec/kubernetes/... would be made there)
#     and /var/lib/kubelet, /var/lib/etcd, /var/log/pods, /var/log/containers
#     are directories of the node's; containerd (containerd.sh --mountns), every
#     container it runs, pykubelet and kubeadm all run in there
#     (`nodehost.sh exec`);
#   - pykubelet masked as every test kubelet is (python -m
#     testsupport.kubelet_process: the kernel tunables it sets are files of
#     BASE/kubelet bound over /proc/sys/<key>, its device-plugin directory one
#     of BASE/kubelet) in a mount namespace of its own on top of the node's,
#     /var/lib/kubelet shared with the node's so its volumes reach containerd;
#   - the cgroup root /kadm-NAME in every hierarchy (the kubelet's cgroupRoot,
#     so its QoS and pod cgroups never meet another kubelet's).
# The images kubeadm names come from build-images.sh --kubeadm and are
# imported into that containerd: nothing is pulled.
#
# pykubelet is started as kubeadm's systemd drop-in (10-kubeadm.conf) starts
# the kubelet, which cannot happen here (no systemd; kubeadm's kubelet-start
# phase tries `systemctl` and goes on with a warning): a loop standing in for
# the unit waits until kubeadm has written /var/lib/kubelet/config.yaml and
# kubeadm-flags.env, then runs
#   pykubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
#     --kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml \
#     $KUBELET_KUBEADM_ARGS
# and, like the unit's Restart=always with RestartSec=10, runs it again 10 s
# after it exits. Then `kubeadm init` runs with every phase but the CoreDNS
# add-on (the testbed's DNS stand-in, testsupport/cluster_dns.py, takes its
# place) and preflight, which is run on its own first with every error ignored
# (no systemd, swap, ...) only to record them: its image check needs crictl,
# which Debian lacks, and fails init whatever is ignored.
#
# Usage:
#   kubeadm-try.sh up      make the above, run kubeadm init; leaves everything running
#   kubeadm-try.sh status  what runs; the kubelet's and kubeadm's log tails
#   kubeadm-try.sh down    stop and remove everything `up` made (idempotent)
# Environment: KADM_NAME (default kadm), KADM_INDEX (default 7),
#   KADM_BASE (default /tmp/kadm-try), KADM_INIT_TIMEOUT (seconds, default 420),
#   KADM_KUBELET_EXTRA_ARGS (the KUBELET_EXTRA_ARGS written to /etc/default/kubelet in
#   the namespace; default --fail-cgroup-v1=false on a cgroup v1 machine, see
#   default_extra_args; set it empty to write none).
# Must run as root; the control-plane cache must hold kubeadm (controlplane-build.sh).
set -euo pipefail

NAME="${KADM_NAME:-kadm}"
INDEX="${KADM_INDEX:-7}"
BASE="${KADM_BASE:-/tmp/kadm-try}"
INIT_TIMEOUT="${KADM_INIT_TIMEOUT:-420}"
CGROUP_ROOT="/kadm-$NAME"
IMAGES_DIR="${PYKUBELET_IMAGES_DIR:-/tmp/pykubelet-images}"
RESTART_SECONDS=10

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
netns="/run/netns/pykn-$NAME"
ctd_dir="$BASE/ctd"

log() { echo "kubeadm-try.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }
# Usage: inside CMD...: CMD on the test host (its mount and network namespaces).
inside() { "$here/nodehost.sh" exec "$NAME" -- "$@"; }
# The test host's fact KEY (nodehost.sh env); empty when there is no such host.
node_fact() {
    "$here/nodehost.sh" env "$NAME" 2>/dev/null | sed -n "s/^$1=//p" || true
}

cgroup_hierarchies() {
    local h
    for h in /sys/fs/cgroup/*/; do
        [[ -d "$h" && ! -L "${h%/}" ]] && echo "${h%/}"
    done
    return 0
}

write_kubeadm_config() {
    local node_ip="$1" socket="$2"
    cat >"$BASE/kubeadm.yaml" <<EOF
apiVersion: kubeadm.k8s.io/v1beta2
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: $node_ip
  bindPort: 6443
nodeRegistration:
  name: $NAME
  criSocket: $socket
  kubeletExtraArgs:
    node-ip: $node_ip
---
apiVersion: kubeadm.k8s.io/v1beta2
kind: ClusterConfiguration
kubernetesVersion: $kubernetes_version
networking:
  serviceSubnet: 10.96.0.0/12
  dnsDomain: cluster.local
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
conntrack:
  maxPerCore: 0
EOF
}

# The kubelet flags an operator would put in /etc/default/kubelet here: on a
# cgroup v1 machine (this one), --fail-cgroup-v1=false, since pykubelet
# follows the kubelet of v1.35, which refuses cgroup v1 unless told, and
# kubeadm 1.20's KubeletConfiguration has no failCgroupV1 field to carry it
# (kubeadm drops it from the config it writes).
default_extra_args() {
    [[ -f /sys/fs/cgroup/cgroup.controllers ]] || echo "--fail-cgroup-v1=false"
}

# The stand-in for the kubelet unit with kubeadm's drop-in (see the header).
start_kubelet_unit() {
    local pykubelet="$repo/.venv/bin/pykubelet"
    [[ -x "$pykubelet" ]] || die "no $pykubelet (bash scripts/setup.sh)"
    mkdir -p "$BASE/kubelet"
    cat >"$BASE/kubelet-unit.sh" <<EOF
#!/bin/sh
# kubeadm's 10-kubeadm.conf, as a loop (kubeadm-try.sh).
# Started by setsid: its pid is its process group's, which \`down\` ends.
echo \$\$ >$BASE/kubelet-unit.pid
# testsupport.kubelet_process is found from the repository.
cd $repo
KUBELET_KUBECONFIG_ARGS="--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
KUBELET_CONFIG_ARGS="--config=/var/lib/kubelet/config.yaml"
while :; do
    if [ -f /var/lib/kubelet/config.yaml ] && [ -f /var/lib/kubelet/kubeadm-flags.env ]; then
        KUBELET_KUBEADM_ARGS=""
        KUBELET_EXTRA_ARGS=""
        . /var/lib/kubelet/kubeadm-flags.env
        if [ -f /etc/default/kubelet ]; then . /etc/default/kubelet; fi
        echo "=== \$(date +%T) starting pykubelet \$KUBELET_KUBECONFIG_ARGS \$KUBELET_CONFIG_ARGS \$KUBELET_KUBEADM_ARGS \$KUBELET_EXTRA_ARGS"
        $repo/.venv/bin/python -m testsupport.kubelet_process --base $BASE/kubelet \\
            --root-dir /var/lib/kubelet -- $pykubelet \$KUBELET_KUBECONFIG_ARGS \\
            \$KUBELET_CONFIG_ARGS \$KUBELET_KUBEADM_ARGS \$KUBELET_EXTRA_ARGS &
        echo \$! >$BASE/kubelet.pid
        wait \$! && status=0 || status=\$?
        echo "=== \$(date +%T) pykubelet exited with status \$status"
    fi
    sleep $RESTART_SECONDS
done
EOF
    chmod 0755 "$BASE/kubelet-unit.sh"
    inside setsid "$BASE/kubelet-unit.sh" >"$BASE/kubelet.log" 2>&1 </dev/null &
}

cmd_up() {
    [[ $EUID -eq 0 ]] || die "must run as root"
    [[ ! -e "$BASE/kubeadm.yaml" ]] || die "$BASE exists: run '$0 down' first"
    local bin_dir kubeadm
    bin_dir="$("$here/controlplane-build.sh" --check)" \
        || die "no complete control-plane cache: run $here/controlplane-build.sh"
    kubeadm="$bin_dir/kubeadm"
    kubernetes_version="$("$kubeadm" version -o short)"
    "$here/build-images.sh" "$IMAGES_DIR" --kubeadm "$bin_dir" >&2
    local facts node_ip pod_cidr mountns
    facts="$("$here/nodehost.sh" create "$NAME" "$INDEX")"
    node_ip="$(sed -n 's/^NODE_IP=//p' <<<"$facts")"
    pod_cidr="$(sed -n 's/^POD_CIDR=//p' <<<"$facts")"
    mountns="$(sed -n 's/^NODE_MOUNTNS_PATH=//p' <<<"$facts")"
    log "test host $NAME: node IP $node_ip, pod CIDR $pod_cidr, mount namespace $mountns"
    mkdir -p "$BASE"
    local h
    while read -r h; do
        mkdir -p "$h$CGROUP_ROOT"
    done < <(cgroup_hierarchies)
    # PATH first the venv's: containerd.sh runs python3 for its CRI helper.
    PATH="$repo/.venv/bin:$PATH" PYKUBELET_IMAGES_DIR="$IMAGES_DIR" \
        "$here/containerd.sh" start "$ctd_dir" --netns "$netns" --pod-subnet "$pod_cidr" \
        --mountns "$mountns" >&2
    PATH="$repo/.venv/bin:$PATH" \
        "$here/containerd.sh" import "$ctd_dir" "$IMAGES_DIR"/kubeadm/*.tar >&2
    write_kubeadm_config "$node_ip" "$ctd_dir/containerd.sock"
    # The operator's own flags, where the drop-in reads them (its
    # EnvironmentFile=-/etc/default/kubelet), in the /etc overlay.
    local extra="${KADM_KUBELET_EXTRA_ARGS-$(default_extra_args)}"
    if [[ -n "$extra" ]]; then
        inside sh -c "echo 'KUBELET_EXTRA_ARGS=\"$extra\"' >/etc/default/kubelet"
        log "/etc/default/kubelet: KUBELET_EXTRA_ARGS=\"$extra\""
    fi
    start_kubelet_unit
    # Preflight on its own, for the record: its image check needs crictl, which
    # Debian does not have, and fails whatever is ignored; init skips it.
    inside "$kubeadm" init phase preflight --config "$BASE/kubeadm.yaml" \
        --ignore-preflight-errors=all >"$BASE/kubeadm-preflight.log" 2>&1 \
        || log "kubeadm init phase preflight failed (log: $BASE/kubeadm-preflight.log)"
    log "kubeadm init (log: $BASE/kubeadm-init.log; kubelet log: $BASE/kubelet.log)"
    local status=0
    inside timeout "$INIT_TIMEOUT" "$kubeadm" init --config "$BASE/kubeadm.yaml" \
        --skip-phases=preflight,addon/coredns -v=1 \
        >"$BASE/kubeadm-init.log" 2>&1 || status=$?
    tail -n 25 "$BASE/kubeadm-init.log" >&2
    log "kubeadm init exited with status $status"
    [[ $status -eq 0 ]] && show_cluster "$bin_dir"
    return "$status"
}

# Usage: show_cluster BIN_DIR: nodes and pods as the cluster's admin sees them,
# with the kubectl of the build and kubeadm's admin.conf (read from the /etc
# overlay's upper directory, in the node's directory: the API server is reachable
# from the machine).
show_cluster() {
    local kubectl="$1/kubectl" admin node_dir
    node_dir="$(node_fact NODE_DIR)"
    admin="$node_dir/upper_etc/kubernetes/admin.conf"
    [[ -n "$node_dir" && -f "$admin" ]] || return 0
    # Give the add-on's kube-proxy pod a moment to start.
    local waited=0 phases
    while :; do
        phases="$("$kubectl" --kubeconfig "$admin" -n kube-system get pods -l k8s-app=kube-proxy \
                  -o jsonpath='{.items[*].status.phase}' 2>/dev/null || true)"
        [[ "$phases" != *Running* && $((waited++)) -lt 30 ]] || break
        sleep 1
    done
    log "KUBECONFIG=$admin $kubectl get nodes,pods -A -o wide"
    "$kubectl" --kubeconfig "$admin" get nodes,pods -A -o wide >&2 || true
}

cmd_status() {
    log "test host: $(node_fact NODE_MOUNTNS_PATH || true)"
    local bin_dir
    bin_dir="$("$here/controlplane-build.sh" --check 2>/dev/null || true)"
    [[ -z "$bin_dir" ]] || show_cluster "$bin_dir"
    if [[ -f "$BASE/kubelet.log" ]]; then
        log "kubelet log (tail):"
        tail -n 20 "$BASE/kubelet.log" >&2
    fi
    if [[ -S "$ctd_dir/containerd.sock" ]]; then
        "$repo/.venv/bin/python" "$here/cri_tool.py" ps "$ctd_dir/containerd.sock" >&2 || true
    fi
}

# Usage: stop_pid FILE: end the process whose pid FILE holds (TERM, then KILL).
stop_pid() {
    local pid waited=0
    pid="$(cat "$1" 2>/dev/null || true)"
    alive "$pid" || return 0
    kill "$pid" 2>/dev/null || true
    while alive "$pid" && (( waited++ < 100 )); do sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
}

cmd_down() {
    # The unit's loop leads a process group of its own (setsid): its sleep goes too.
    local unit
    unit="$(cat "$BASE/kubelet-unit.pid" 2>/dev/null || true)"
    alive "$unit" && kill -- "-$unit" 2>/dev/null || true
    stop_pid "$BASE/kubelet-unit.pid"
    stop_pid "$BASE/kubelet.pid"
    # In the node's mount namespace (containerd.sh enters it again, from DIR/network).
    if [[ -d "$ctd_dir" ]]; then
        PATH="$repo/.venv/bin:$PATH" "$here/containerd.sh" stop "$ctd_dir" >&2 \
            || log "containerd.sh stop failed; going on"
    fi
    local h
    while read -r h; do
        [[ -d "$h$CGROUP_ROOT" ]] || continue
        # Deepest first; a cgroup with processes left in it stays (and is named).
        find "$h$CGROUP_ROOT" -depth -type d -exec rmdir {} \; 2>/dev/null \
            || log "could not remove $h$CGROUP_ROOT"
    done < <(cgroup_hierarchies)
    local left
    left="$(ip netns pids "pykn-$NAME" 2>/dev/null | xargs -r ps -o pid=,args= -p || true)"
    [[ -z "$left" ]] || log "still in pykn-$NAME (nodehost.sh ends them):"$'\n'"$left"
    "$here/nodehost.sh" delete "$NAME" >&2 || log "nodehost.sh delete $NAME failed"
    rm -rf "$BASE"
}

case "${1:-}" in
    up) cmd_up ;;
    status) cmd_status ;;
    down) cmd_down ;;
    *) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
