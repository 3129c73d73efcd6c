#!/usr/bin/env bash
# Try `kubeadm init`, `kubeadm join` and `kubeadm reset` (v1.20.2, built with the
# control plane) on two test hosts with pykubelet as the kubelet (or the Go
# kubelet 1.20 as the reference), the machine's own paths never written.
#
# What it makes, all removed by `down`, for each test host HOST (the control
# plane NAME, and WORKER once `join` ran):
#   - test host HOST (nodehost.sh, node IP 10.89.0.(10+INDEX)): its network
#     namespace pykn-HOST and its mount namespace, where /etc and /usr/libexec
#     are overlays whose writes go to the node's directory (/etc/kubernetes
#     does not exist on the machine, and the controller manager's
#     DirectoryOrCreate volume /usr/libexec/kubernetes/... would be made there)
#     and /var/lib/kubelet, /var/lib/etcd, /var/log/pods, /var/log/containers
#     are directories of the node's; containerd (containerd.sh --mountns), every
#     container it runs, the kubelet and kubeadm all run in there
#     (`nodehost.sh exec`);
#   - the kubelet masked as every test kubelet is (python -m
#     testsupport.kubelet_process: the kernel tunables it sets are files of
#     HBASE/kubelet bound over /proc/sys/<key>) in a mount namespace of its own
#     on top of the node's, /var/lib/kubelet shared with the node's so its
#     volumes reach containerd;
#   - the cgroup root /kadm-HOST in every hierarchy (the kubelet's cgroupRoot,
#     so its QoS and pod cgroups never meet another kubelet's; the worker's is
#     given by --cgroup-root, since the KubeletConfiguration kubeadm join
#     downloads is the cluster's, the control plane's cgroupRoot in it);
#   - HBASE (BASE for NAME, BASE/WORKER for WORKER): containerd's directory, logs,
#     the unit stand-in and HBASE/bin, first on kubeadm's PATH, with the two
#     programs kubeadm runs that this machine lacks (below).
# The images kubeadm names come from build-images.sh --kubeadm and are imported
# into each host's containerd with the test images (pykubelet.local/busybox,
# pause): nothing is pulled.
#
# The kubelet unit. There is no systemd here; a loop stands in for the kubelet
# unit with kubeadm's drop-in (packaging/systemd/20-kubeadm.conf for pykubelet,
# 10-kubeadm.conf for the Go kubelet): while the unit is active and kubeadm has
# written /var/lib/kubelet/config.yaml and kubeadm-flags.env, it runs
#   KUBELET --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
#     --kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml \
#     $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
# (KUBELET_EXTRA_ARGS from /etc/default/kubelet, as the operator writes it) and,
# like Restart=always with RestartSec=10, runs it again 10 s after it exits. The
# unit is active from the start, as an enabled unit is after boot (crash-looping
# until kubeadm writes the config, as the real one does). HBASE/bin/systemctl
# is the stand-in's systemctl, which kubeadm calls: `stop kubelet` makes the
# unit inactive and ends the kubelet (TERM, then KILL after 30 s) before it
# returns, `start`/`restart` make it active, `is-active`, `is-enabled`, `status`
# and `daemon-reload` answer as systemd would; every call is logged in
# HBASE/systemctl.log. So kubeadm's kubelet-start phase (stop, write the
# files, restart) and `kubeadm reset` (stop first) drive the kubelet as they
# drive the real unit. The loop also ends the kubelet if its config.yaml
# disappears while it runs (kubeadm reset's clean-up without the stop).
#
# crictl. Debian has no crictl, which kubeadm needs for its preflight (is the
# runtime up, are the images there) and for `kubeadm reset` (remove the
# Kubernetes pods). HBASE/bin/crictl is a stand-in for the few commands kubeadm
# 1.20 runs (-r SOCKET with info, pods -q, stopp, rmp, inspecti, pull, ps -a -q),
# over the CRI with the venv's CRI client; calls are logged in HBASE/crictl.log.
# `pull` fails: there is no registry (k8s.gcr.io/coredns:1.7.0 is not built).
#
# Preflight: init and join run it, with two errors ignored: KubeletVersion (no
# `kubelet` on PATH: the unit's program is not the Go package's) and ImagePull
# (k8s.gcr.io/coredns:1.7.0 is not built: init skips the addon/coredns phase, the
# testbed's DNS stand-in testsupport/cluster_dns.py takes its place). Its warnings
# (no ethtool or socat, the host name not resolvable) are harmless here.
#
# kubeadm reset runs in a mount namespace of its own over the host's, where the
# machine's /var/lib/dockershim and /var/run/kubernetes, whose contents reset
# deletes, are empty directories of HBASE/shadow (reset_mounts; the host's
# /var/lib/cni, which reset empties too, is the node's own, nodehost.sh); it is
# given --cri-socket, as kubeadm's docs say for a runtime other than Docker (a worker without admin.conf would be taken for a
# Docker host, and the machine's docker asked); HBASE/bin/docker refuses anyway.
#
# Usage:
#   kubeadm-try.sh up      host NAME, kubeadm init; leaves everything running; prints
#                          how long after init each control-plane mirror pod appeared;
#                          then the cluster DNS in the DNS add-on's place: the
#                          testbed's stand-in (python -m testsupport.cluster_addons dns,
#                          on the machine's address on the test hosts' switch) behind
#                          kube-system/kube-dns at 10.96.0.10, the clusterDNS kubeadm
#                          gives the kubelets
#   kubeadm-try.sh join    host WORKER, kubeadm join with a new token of the control
#                          plane's (`kubeadm token create --print-join-command`);
#                          waits until WORKER is Ready and kube-proxy runs there
#   kubeadm-try.sh deploy  as a user: a Deployment of 4 busybox pods spread over both
#                          nodes (tolerating the control plane's NoSchedule taint),
#                          `kubectl logs` and `kubectl exec` on one pod of each node,
#                          and a cluster DNS lookup from each
#   kubeadm-try.sh reset   kubeadm reset -f on WORKER then NAME, then checks that each
#                          host has no pod, container, kubelet, file under
#                          /etc/kubernetes, /var/lib/kubelet or /var/lib/etcd, or
#                          mount under /var/lib/kubelet left (exit 1 naming what is)
#   kubeadm-try.sh status  what runs; the kubelets' and kubeadm's log tails
#   kubeadm-try.sh down    stop and remove everything (idempotent)
# Environment: KADM_NAME (default kadm), KADM_INDEX (default 7), KADM_WORKER
#   (default NAME-w), KADM_WORKER_INDEX (default 8), KADM_BASE (default
#   /tmp/kadm-try), KADM_INIT_TIMEOUT (seconds, default 420; also join's),
#   KADM_KUBELET (py, the default: pykubelet; go: the Go kubelet of the
#   control-plane cache), KADM_KUBELET_EXTRA_ARGS (the KUBELET_EXTRA_ARGS written
#   to /etc/default/kubelet on each host, before the node's own --node-ip (and
#   the worker's --cgroup-root); default see default_extra_args).
# Must run as root; the control-plane cache must hold kubeadm (controlplane-build.sh).
set -euo pipefail

NAME="${KADM_NAME:-kadm}"
INDEX="${KADM_INDEX:-7}"
WORKER="${KADM_WORKER:-$NAME-w}"
WORKER_INDEX="${KADM_WORKER_INDEX:-8}"
BASE="${KADM_BASE:-/tmp/kadm-try}"
INIT_TIMEOUT="${KADM_INIT_TIMEOUT:-420}"
KUBELET_KIND="${KADM_KUBELET:-py}"
IMAGES_DIR="${PYKUBELET_IMAGES_DIR:-/tmp/pykubelet-images}"
BUSYBOX_IMAGE="pykubelet.local/busybox:1.35"
RESTART_SECONDS=10
STOP_SECONDS=30
DEPLOYMENT=kadm-spread
REPLICAS=4
PREFLIGHT_IGNORED="KubeletVersion,ImagePull"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

log() { echo "kubeadm-try.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }
# Usage: host_base HOST: the directory of HOST's own files.
host_base() {
    if [[ "$1" == "$NAME" ]]; then echo "$BASE"; else echo "$BASE/$1"; fi
}
# Usage: on HOST CMD...: CMD on test host HOST (its mount and network namespaces),
# HOST's stand-ins for systemctl and crictl first on its PATH.
on() {
    local host="$1"
    shift
    "$here/nodehost.sh" exec "$host" -- env PATH="$(host_base "$host")/bin:$PATH" "$@"
}
# Usage: node_fact HOST KEY: test host HOST's fact KEY (nodehost.sh env); empty when
# there is no such host.
node_fact() {
    "$here/nodehost.sh" env "$1" 2>/dev/null | sed -n "s/^$2=//p" || true
}
bin_dir() {
    "$here/controlplane-build.sh" --check \
        || die "no complete control-plane cache: run $here/controlplane-build.sh"
}
# Usage: kc ARGS...: the build's kubectl as the cluster's admin (kubeadm's admin.conf,
# read from the control plane's /etc overlay: the API server is reachable from here).
kc() {
    "$bin_dir/kubectl" --kubeconfig "$(node_fact "$NAME" NODE_DIR)/upper_etc/kubernetes/admin.conf" \
        "$@"
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
cgroupRoot: /kadm-$NAME
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
conntrack:
  maxPerCore: 0
EOF
}

# The kubelet flags an operator would put in /etc/default/kubelet here, besides the
# node's own. pykubelet on a cgroup v1 machine (this one): --fail-cgroup-v1=false,
# since pykubelet follows the kubelet of v1.35, which refuses cgroup v1 unless told,
# and kubeadm 1.20's KubeletConfiguration has no failCgroupV1 field to carry it
# (kubeadm drops it from the config it writes). The Go kubelet 1.20:
# --fail-swap-on=false (the machine has swap) and --protect-kernel-defaults=false
# (its default, said: it sets the kernel tunables it wants, which here are the
# masked files of HBASE/kubelet, never the machine's).
default_extra_args() {
    if [[ "$KUBELET_KIND" == go ]]; then
        echo "--fail-swap-on=false --protect-kernel-defaults=false"
    elif [[ ! -f /sys/fs/cgroup/cgroup.controllers ]]; then
        echo "--fail-cgroup-v1=false"
    fi
}

kubelet_binary() {
    case "$KUBELET_KIND" in
        py) echo "$repo/.venv/bin/pykubelet" ;;
        go) echo "$bin_dir/kubelet" ;;
        *) die "KADM_KUBELET must be py or go, not '$KUBELET_KIND'" ;;
    esac
}

# Usage: write_stand_ins HBASE SOCKET: HBASE/bin/systemctl and HBASE/bin/crictl (header).
write_stand_ins() {
    local hbase="$1" socket="$2"
    mkdir -p "$hbase/bin"
    cat >"$hbase/bin/systemctl" <<EOF
#!/bin/sh
# systemctl for kubeadm on this test host: the kubelet unit is the loop of
# $hbase/kubelet-unit.sh, active while $hbase/unit-active exists (kubeadm-try.sh).
echo "\$(date +%T.%N | cut -c1-12) systemctl \$*" >>$hbase/systemctl.log
active=$hbase/unit-active
stop_kubelet() {
    rm -f \$active
    pid=\$(cat $hbase/kubelet.pid 2>/dev/null || true)
    [ -n "\$pid" ] || return 0
    kill "\$pid" 2>/dev/null || true
    waited=0
    while [ -f $hbase/kubelet.pid ] && [ \$waited -lt $((STOP_SECONDS * 10)) ]; do
        sleep 0.1; waited=\$((waited + 1))
    done
    if [ -f $hbase/kubelet.pid ]; then kill -KILL "\$pid" 2>/dev/null || true; fi
    return 0
}
verb=""; unit=""
for arg in "\$@"; do
    case "\$arg" in
        -*) ;;
        *) if [ -z "\$verb" ]; then verb=\$arg; elif [ -z "\$unit" ]; then unit=\${arg%.service}; fi ;;
    esac
done
case "\$verb" in
    daemon-reload|enable|disable) exit 0 ;;
esac
[ "\$unit" = kubelet ] || { echo "Unit \$unit.service could not be found." >&2; exit 5; }
case "\$verb" in
    start) touch \$active ;;
    stop) stop_kubelet ;;
    restart) stop_kubelet; touch \$active ;;
    is-enabled) echo enabled ;;
    is-active) if [ -f \$active ]; then echo active; else echo inactive; exit 3; fi ;;
    status)
        echo "* kubelet.service - kubelet: the loop of $hbase/kubelet-unit.sh"
        echo "     Loaded: loaded (kubeadm-try.sh stand-in; enabled)"
        if [ -f \$active ]; then echo "     Active: active (running)"; else echo "     Active: inactive (dead)"; exit 3; fi ;;
    *) echo "systemctl stand-in: '\$verb' is not handled" >&2; exit 1 ;;
esac
EOF
    cat >"$hbase/bin/crictl" <<EOF
#!$repo/.venv/bin/python
"""crictl for kubeadm on this test host: the commands kubeadm 1.20 runs (kubeadm-try.sh)."""
import sys
import time

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

with open("$hbase/crictl.log", "a") as log:
    log.write(time.strftime("%T") + " crictl " + " ".join(sys.argv[1:]) + "\n")
socket, words, i = "$socket", [], 1
while i < len(sys.argv):
    arg = sys.argv[i]
    if arg in ("-r", "--runtime-endpoint", "-i", "--image-endpoint"):
        socket = sys.argv[i + 1] if arg in ("-r", "--runtime-endpoint") else socket
        i += 2
        continue
    if not arg.startswith("-"):
        words.append(arg)
    i += 1
if not words:
    sys.exit("crictl stand-in: no command")
socket = socket.removeprefix("unix://")
channel = grpc.insecure_channel("unix://" + socket)
runtime = api_pb2_grpc.RuntimeServiceStub(channel)
images = api_pb2_grpc.ImageServiceStub(channel)
command, args = words[0], words[1:]
try:
    if command == "info":
        print(runtime.Status(api_pb2.StatusRequest(), timeout=10))
    elif command == "pods":
        for pod in runtime.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=10).items:
            print(pod.id)
    elif command == "ps":
        for ctr in runtime.ListContainers(api_pb2.ListContainersRequest(), timeout=10).containers:
            print(ctr.id)
    elif command == "stopp":
        for pod_id in args:
            runtime.StopPodSandbox(api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod_id),
                                   timeout=60)
            print(f"Stopped sandbox {pod_id}")
    elif command == "rmp":
        for pod_id in args:
            runtime.RemovePodSandbox(api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod_id),
                                     timeout=60)
            print(f"Removed sandbox {pod_id}")
    elif command == "inspecti":
        status = images.ImageStatus(api_pb2.ImageStatusRequest(
            image=api_pb2.ImageSpec(image=args[0])), timeout=10)
        if not status.image.id:
            sys.exit(f"no such image {args[0]} present")
        print(status.image)
    elif command == "pull":
        sys.exit(f"crictl stand-in: no registry to pull {args[0]} from")
    else:
        sys.exit(f"crictl stand-in: '{command}' is not handled")
except grpc.RpcError as err:
    sys.exit(f"crictl stand-in: {command}: {err.details()}")
EOF
    # The machine's docker, if it has one, is never kubeadm's here.
    cat >"$hbase/bin/docker" <<EOF
#!/bin/sh
echo "\$(date +%T) docker \$*" >>$hbase/docker.log
echo "docker stand-in: this test host has no Docker (kubeadm-try.sh)" >&2
exit 1
EOF
    chmod 0755 "$hbase/bin/systemctl" "$hbase/bin/crictl" "$hbase/bin/docker"
}

# Usage: start_kubelet_unit HOST: the stand-in for the kubelet unit (see the header).
start_kubelet_unit() {
    local host="$1" hbase kubelet
    hbase="$(host_base "$host")"
    kubelet="$(kubelet_binary)"
    [[ -x "$kubelet" ]] || die "no $kubelet (bash scripts/setup.sh, or controlplane-build.sh)"
    mkdir -p "$hbase/kubelet"
    touch "$hbase/unit-active"
    cat >"$hbase/kubelet-unit.sh" <<EOF
#!/bin/sh
# The kubelet unit with kubeadm's drop-in, as a loop (kubeadm-try.sh).
# Started by setsid: its pid is its process group's, which \`down\` ends.
echo \$\$ >$hbase/kubelet-unit.pid
# testsupport.kubelet_process is found from the repository.
cd $repo
KUBELET_KUBECONFIG_ARGS="--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
KUBELET_CONFIG_ARGS="--config=/var/lib/kubelet/config.yaml"
active=$hbase/unit-active
while :; do
    if [ -f \$active ] && [ -f /var/lib/kubelet/config.yaml ] && [ -f /var/lib/kubelet/kubeadm-flags.env ]; then
        KUBELET_KUBEADM_ARGS=""
        KUBELET_EXTRA_ARGS=""
        . /var/lib/kubelet/kubeadm-flags.env
        if [ -f /etc/default/kubelet ]; then . /etc/default/kubelet; fi
        echo "=== \$(date +%T) starting $kubelet \$KUBELET_KUBECONFIG_ARGS \$KUBELET_CONFIG_ARGS \$KUBELET_KUBEADM_ARGS \$KUBELET_EXTRA_ARGS"
        $repo/.venv/bin/python -m testsupport.kubelet_process --base $hbase/kubelet \\
            --root-dir /var/lib/kubelet -- $kubelet \$KUBELET_KUBECONFIG_ARGS \\
            \$KUBELET_CONFIG_ARGS \$KUBELET_KUBEADM_ARGS \$KUBELET_EXTRA_ARGS &
        pid=\$!
        echo \$pid >$hbase/kubelet.pid
        # Its config gone while it runs (kubeadm reset's clean-up): stopped as by
        # \`systemctl stop\`, the unit made inactive.
        (
            while kill -0 \$pid 2>/dev/null; do
                if [ ! -f /var/lib/kubelet/config.yaml ]; then
                    echo "=== \$(date +%T) /var/lib/kubelet/config.yaml is gone: stopping the kubelet"
                    rm -f \$active
                    kill \$pid 2>/dev/null
                    break
                fi
                sleep 1
            done
        ) &
        watcher=\$!
        wait \$pid && status=0 || status=\$?
        kill \$watcher 2>/dev/null || true
        rm -f $hbase/kubelet.pid
        echo "=== \$(date +%T) the kubelet exited with status \$status"
        # Restart=always, RestartSec: again after a pause while the unit stays active.
        if [ -f \$active ]; then sleep $RESTART_SECONDS; fi
    else
        sleep 1
    fi
done
EOF
    chmod 0755 "$hbase/kubelet-unit.sh"
    "$here/nodehost.sh" exec "$host" -- setsid "$hbase/kubelet-unit.sh" \
        >"$hbase/kubelet.log" 2>&1 </dev/null &
}

# Usage: make_host HOST INDEX [EXTRA_ARGS]: test host HOST with its containerd (the
# images imported), /etc/default/kubelet, the stand-ins and the kubelet unit. Sets
# host_ip and host_socket.
make_host() {
    local host="$1" index="$2" own_args="${3:-}" hbase facts pod_cidr mountns
    hbase="$(host_base "$host")"
    facts="$("$here/nodehost.sh" create "$host" "$index")"
    host_ip="$(sed -n 's/^NODE_IP=//p' <<<"$facts")"
    pod_cidr="$(sed -n 's/^POD_CIDR=//p' <<<"$facts")"
    mountns="$(sed -n 's/^NODE_MOUNTNS_PATH=//p' <<<"$facts")"
    log "test host $host: node IP $host_ip, pod CIDR $pod_cidr, mount namespace $mountns"
    mkdir -p "$hbase"
    local h
    while read -r h; do
        mkdir -p "$h/kadm-$host"
    done < <(cgroup_hierarchies)
    # PATH first the venv's: containerd.sh runs python3 for its CRI helper.
    PATH="$repo/.venv/bin:$PATH" PYKUBELET_IMAGES_DIR="$IMAGES_DIR" \
        "$here/containerd.sh" start "$hbase/ctd" --netns "/run/netns/pykn-$host" \
        --pod-subnet "$pod_cidr" --mountns "$mountns" >&2
    PATH="$repo/.venv/bin:$PATH" \
        "$here/containerd.sh" import "$hbase/ctd" "$IMAGES_DIR"/kubeadm/*.tar >&2
    host_socket="$hbase/ctd/containerd.sock"
    write_stand_ins "$hbase" "$host_socket"
    # The operator's own flags, where the drop-in reads them (its
    # EnvironmentFile=-/etc/default/kubelet), in the /etc overlay.
    local extra
    extra="${KADM_KUBELET_EXTRA_ARGS-$(default_extra_args)} $own_args"
    extra="$(echo $extra)"
    if [[ -n "$extra" ]]; then
        on "$host" sh -c "echo 'KUBELET_EXTRA_ARGS=\"$extra\"' >/etc/default/kubelet"
        log "$host: /etc/default/kubelet: KUBELET_EXTRA_ARGS=\"$extra\""
    fi
    start_kubelet_unit "$host"
}

cmd_up() {
    [[ $EUID -eq 0 ]] || die "must run as root"
    [[ ! -e "$BASE/kubeadm.yaml" ]] || die "$BASE exists: run '$0 down' first"
    local kubeadm
    kubeadm="$bin_dir/kubeadm"
    kubernetes_version="$("$kubeadm" version -o short)"
    "$here/build-images.sh" "$IMAGES_DIR" --kubeadm "$bin_dir" >&2
    make_host "$NAME" "$INDEX"
    write_kubeadm_config "$host_ip" "$host_socket"
    log "kubeadm init with $KUBELET_KIND kubelet (log: $BASE/kubeadm-init.log; kubelet log: $BASE/kubelet.log)"
    local status=0 started
    started=$(date +%s)
    on "$NAME" timeout "$INIT_TIMEOUT" "$kubeadm" init --config "$BASE/kubeadm.yaml" \
        --skip-phases=addon/coredns --ignore-preflight-errors="$PREFLIGHT_IGNORED" -v=1 \
        >"$BASE/kubeadm-init.log" 2>&1 || status=$?
    local done_at
    done_at=$(date +%s)
    tail -n 25 "$BASE/kubeadm-init.log" >&2
    log "kubeadm init exited with status $status after $((done_at - started)) s"
    [[ $status -eq 0 ]] || return "$status"
    mirror_pod_times "$done_at"
    start_dns
    show_cluster
}

# The testbed's stand-in for CoreDNS (see up), its Service applied as the admin.
start_dns() {
    local address admin
    address="$(node_fact "$NAME" HOST_ADDRESS)"
    admin="$(node_fact "$NAME" NODE_DIR)/upper_etc/kubernetes/admin.conf"
    log "the cluster DNS stand-in on $address (log: $BASE/dns.log)"
    (cd "$repo" && exec setsid "$repo/.venv/bin/python" -m testsupport.cluster_addons dns \
        --kubeconfig "$admin" --address "$address" --dir "$BASE/dns" \
        </dev/null >"$BASE/dns.log" 2>&1) &
    echo $! >"$BASE/dns.pid"
    wait_for "the cluster DNS serving" 60 test -s "$BASE/dns/kube-dns.json"
    kc apply -f "$BASE/dns/kube-dns.json" >&2
}

# Usage: mirror_pod_times SINCE: how long after SINCE (epoch seconds: init's end) each
# control-plane static pod's mirror pod is seen (up to 150 s).
mirror_pod_times() {
    local since="$1" component seen=() names
    local components=(etcd kube-apiserver kube-controller-manager kube-scheduler)
    while (( ${#seen[@]} < ${#components[@]} && $(date +%s) - since < 150 )); do
        names="$(kc -n kube-system get pods -o name 2>/dev/null || true)"
        for component in "${components[@]}"; do
            [[ " ${seen[*]} " != *" $component "* ]] || continue
            if grep -qx "pod/$component-$NAME" <<<"$names"; then
                seen+=("$component")
                log "mirror pod $component-$NAME: seen $(( $(date +%s) - since )) s after init"
            fi
        done
        sleep 1
    done
    for component in "${components[@]}"; do
        [[ " ${seen[*]} " == *" $component "* ]] || log "mirror pod $component-$NAME: not seen in 150 s"
    done
}

show_cluster() {
    local admin
    admin="$(node_fact "$NAME" NODE_DIR)/upper_etc/kubernetes/admin.conf"
    [[ -f "$admin" ]] || return 0
    # Give the add-on's kube-proxy pods a moment to start.
    local waited=0 phases
    while :; do
        phases="$(kc -n kube-system get pods -l k8s-app=kube-proxy \
                  -o jsonpath='{.items[*].status.phase}' 2>/dev/null || true)"
        [[ "$phases" != *Pending* && -n "$phases" || $((waited++)) -ge 30 ]] && break
        sleep 1
    done
    log "KUBECONFIG=$admin $bin_dir/kubectl get nodes,pods -A -o wide"
    kc get nodes,pods -A -o wide >&2 || true
}

# Usage: wait_for WHAT SECONDS CMD...: run CMD every 2 s until it succeeds (die after SECONDS).
wait_for() {
    local what="$1" seconds="$2" started
    shift 2
    started=$(date +%s)
    until "$@" >/dev/null 2>&1; do
        (( $(date +%s) - started < seconds )) || die "timed out after $seconds s waiting for $what"
        sleep 2
    done
    log "$what after $(( $(date +%s) - started )) s"
}

node_ready() {
    [[ "$(kc get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}
kube_proxy_running() {
    [[ "$(kc -n kube-system get pods -l k8s-app=kube-proxy --field-selector "spec.nodeName=$1" \
          -o jsonpath='{.items[*].status.containerStatuses[*].ready}')" == *true* ]]
}

cmd_join() {
    [[ -e "$BASE/kubeadm.yaml" ]] || die "no control plane: run '$0 up' first"
    [[ ! -e "$(host_base "$WORKER")/kubelet-unit.sh" ]] || die "$WORKER exists: run '$0 down' first"
    local kubeadm="$bin_dir/kubeadm" join_command
    # The command `kubeadm init` printed, with a token of its own (init's expires in 24 h).
    join_command="$(on "$NAME" "$kubeadm" token create --print-join-command)"
    log "on $NAME: kubeadm token create --print-join-command: $join_command"
    local endpoint token hash
    endpoint="$(awk '{print $3}' <<<"$join_command")"
    token="$(sed -n 's/.*--token \([^ ]*\).*/\1/p' <<<"$join_command")"
    hash="$(sed -n 's/.*--discovery-token-ca-cert-hash \([^ ]*\).*/\1/p' <<<"$join_command")"
    [[ -n "$endpoint" && -n "$token" && -n "$hash" ]] || die "cannot read '$join_command'"
    local worker_ip
    worker_ip="$("$here/nodehost.sh" create "$WORKER" "$WORKER_INDEX" | sed -n 's/^NODE_IP=//p')"
    make_host "$WORKER" "$WORKER_INDEX" "--node-ip=$worker_ip --cgroup-root=/kadm-$WORKER"
    local hbase status=0 started
    hbase="$(host_base "$WORKER")"
    log "on $WORKER: kubeadm join $endpoint --token $token --discovery-token-ca-cert-hash $hash (log: $hbase/kubeadm-join.log; kubelet log: $hbase/kubelet.log)"
    started=$(date +%s)
    on "$WORKER" timeout "$INIT_TIMEOUT" "$kubeadm" join "$endpoint" --token "$token" \
        --discovery-token-ca-cert-hash "$hash" --node-name "$WORKER" --cri-socket "$host_socket" \
        --ignore-preflight-errors="$PREFLIGHT_IGNORED" -v=1 \
        >"$hbase/kubeadm-join.log" 2>&1 || status=$?
    tail -n 15 "$hbase/kubeadm-join.log" >&2
    log "kubeadm join exited with status $status after $(( $(date +%s) - started )) s"
    [[ $status -eq 0 ]] || return "$status"
    wait_for "node $WORKER Ready" 120 node_ready "$WORKER"
    wait_for "kube-proxy running on $WORKER" 120 kube_proxy_running "$WORKER"
    show_cluster
}

deployment_manifest() {
    cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $DEPLOYMENT
spec:
  replicas: $REPLICAS
  selector:
    matchLabels: {app: $DEPLOYMENT}
  template:
    metadata:
      labels: {app: $DEPLOYMENT}
    spec:
      tolerations:
      - {key: node-role.kubernetes.io/master, operator: Exists, effect: NoSchedule}
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        labelSelector:
          matchLabels: {app: $DEPLOYMENT}
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: $BUSYBOX_IMAGE
        imagePullPolicy: Never
        env:
        - name: NODE_NAME
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        command: [sh, -c, 'echo "hello from \$(hostname) on \$NODE_NAME"; exec sleep 3600']
EOF
}

deployment_available() {
    [[ "$(kc get deployment "$DEPLOYMENT" -o jsonpath='{.status.availableReplicas}')" == "$REPLICAS" ]]
}

cmd_deploy() {
    deployment_manifest | kc apply -f - >&2
    wait_for "deployment $DEPLOYMENT: $REPLICAS replicas available" 180 deployment_available
    kc get pods -l "app=$DEPLOYMENT" -o wide >&2
    local node pod failed=0 logs out
    for node in "$NAME" "$WORKER"; do
        pod="$(kc get pods -l "app=$DEPLOYMENT" --field-selector "spec.nodeName=$node" \
               -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true)"
        if [[ -z "$pod" ]]; then
            log "FAIL: no pod of $DEPLOYMENT on $node"; failed=1; continue
        fi
        logs="$(kc logs "$pod" 2>&1 || true)"
        log "kubectl logs $pod: $logs"
        [[ "$logs" == "hello from $pod on $node" ]] || { log "FAIL: logs of $pod"; failed=1; }
        out="$(kc exec "$pod" -- sh -c 'echo "exec in $(hostname) on $NODE_NAME"' 2>&1 || true)"
        log "kubectl exec $pod -- sh -c ...: $out"
        [[ "$out" == "exec in $pod on $node" ]] || { log "FAIL: exec in $pod"; failed=1; }
        out="$(kc exec "$pod" -- nslookup kubernetes.default.svc.cluster.local 2>&1 || true)"
        log "kubectl exec $pod -- nslookup kubernetes.default.svc.cluster.local: $(tr '\n' ' ' <<<"$out")"
        grep -q "^Address.*10\.96\.0\.1\$" <<<"$out" || { log "FAIL: DNS from $pod"; failed=1; }
    done
    return "$failed"
}

# Usage: leftovers HOST: what kubeadm reset left on HOST, one line each (none: nothing).
leftovers() {
    local host="$1" hbase pid
    hbase="$(host_base "$host")"
    pid="$(cat "$hbase/kubelet.pid" 2>/dev/null || true)"
    ! alive "$pid" || echo "$host: the kubelet still runs (pid $pid)"
    [[ ! -f "$hbase/unit-active" ]] || echo "$host: the kubelet unit is still active"
    on "$host" find /etc/kubernetes /var/lib/kubelet /var/lib/etcd -mindepth 1 ! -type d \
        -printf "$host: file %p\n" 2>/dev/null || true
    on "$host" sh -c 'findmnt -rn -o TARGET | grep "^/var/lib/kubelet/" || true' \
        | sed "s|^|$host: mount |"
    on "$host" crictl pods | sed "s|^|$host: pod sandbox |"
    on "$host" crictl ps | sed "s|^|$host: container |"
}

# Usage: reset_mounts HBASE: the shell lines (then exec "$@") that put kubeadm reset in
# a mount namespace of its own, on top of the test host's, where the machine's
# directories whose contents it deletes besides the node's own (/etc/kubernetes,
# /var/lib/kubelet, /var/lib/etcd, /var/lib/cni) are empty directories of
# HBASE/shadow: reset empties /var/lib/dockershim and /var/run/kubernetes, which
# nodehost.sh does not give each node. Only those that exist: a missing one reset
# leaves alone, and no mount point is made on the machine.
reset_mounts() {
    local shadow="$1/shadow"
    cat <<EOF
set -e
for dir in /var/lib/dockershim /var/run/kubernetes; do
    [ -e "\$dir" ] || continue
    mkdir -p "$shadow\$dir"
    # Private here (this namespace's copy), so the bind reaches no other namespace.
    mount --make-private "\$(findmnt -n -o TARGET --target "\$dir" | tail -n 1)"
    mount --bind "$shadow\$dir" "\$dir"
done
exec "\$@"
EOF
}

cmd_reset() {
    local kubeadm="$bin_dir/kubeadm" host hbase status=0 left=""
    stop_pid "$BASE/dns.pid"  # it would only watch the API server go
    for host in "$WORKER" "$NAME"; do
        hbase="$(host_base "$host")"
        [[ -f "$hbase/kubelet-unit.sh" ]] || { log "no host $host: skipped"; continue; }
        log "on $host: kubeadm reset -f --cri-socket $hbase/ctd/containerd.sock (log: $hbase/kubeadm-reset.log)"
        # --cri-socket as kubeadm's docs say for a runtime other than Docker: without
        # it, a host without admin.conf (a worker) is taken for a Docker one.
        on "$host" unshare --mount --propagation unchanged sh -c "$(reset_mounts "$hbase")" \
            kubeadm-reset "$kubeadm" reset -f --cri-socket "$hbase/ctd/containerd.sock" -v=1 \
            >"$hbase/kubeadm-reset.log" 2>&1 || status=$?
        tail -n 15 "$hbase/kubeadm-reset.log" >&2
        log "kubeadm reset on $host exited with status $status"
        left+="$(leftovers "$host")"
    done
    if [[ -n "$left" ]]; then
        log "left after kubeadm reset:"$'\n'"$left"
        return 1
    fi
    log "nothing left on the hosts: no kubelet, pod, container, file under /etc/kubernetes, /var/lib/kubelet, /var/lib/etcd, or kubelet mount"
    return "$status"
}

cmd_status() {
    local host hbase
    show_cluster
    for host in "$NAME" "$WORKER"; do
        hbase="$(host_base "$host")"
        [[ -f "$hbase/kubelet.log" ]] || continue
        log "$host: kubelet log (tail):"
        tail -n 20 "$hbase/kubelet.log" >&2
        if [[ -S "$hbase/ctd/containerd.sock" ]]; then
            "$repo/.venv/bin/python" "$here/cri_tool.py" ps "$hbase/ctd/containerd.sock" >&2 || true
        fi
    done
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

# Usage: remove_host HOST: everything make_host made, gone.
remove_host() {
    local host="$1" hbase unit
    hbase="$(host_base "$host")"
    # The unit's loop leads a process group of its own (setsid): its sleep and watcher go too.
    unit="$(cat "$hbase/kubelet-unit.pid" 2>/dev/null || true)"
    alive "$unit" && kill -- "-$unit" 2>/dev/null || true
    stop_pid "$hbase/kubelet-unit.pid"
    stop_pid "$hbase/kubelet.pid"
    # In the node's mount namespace (containerd.sh enters it again, from DIR/network).
    if [[ -d "$hbase/ctd" ]]; then
        PATH="$repo/.venv/bin:$PATH" "$here/containerd.sh" stop "$hbase/ctd" >&2 \
            || log "containerd.sh stop failed; going on"
    fi
    local h
    while read -r h; do
        [[ -d "$h/kadm-$host" ]] || continue
        # Deepest first; a cgroup with processes left in it stays (and is named).
        find "$h/kadm-$host" -depth -type d -exec rmdir {} \; 2>/dev/null \
            || log "could not remove $h/kadm-$host"
    done < <(cgroup_hierarchies)
    local left
    left="$(ip netns pids "pykn-$host" 2>/dev/null | xargs -r ps -o pid=,args= -p || true)"
    [[ -z "$left" ]] || log "still in pykn-$host (nodehost.sh ends them):"$'\n'"$left"
    "$here/nodehost.sh" delete "$host" >&2 || log "nodehost.sh delete $host failed"
}

cmd_down() {
    stop_pid "$BASE/dns.pid"
    remove_host "$WORKER"
    remove_host "$NAME"
    rm -rf "$BASE"
}

case "${1:-}" in
    up|join|deploy|reset|status)
        bin_dir="$(bin_dir)"
        "cmd_$1" ;;
    down) cmd_down ;;
    *) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
