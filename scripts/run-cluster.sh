#!/usr/bin/env bash
# The README's cluster command: a real Kubernetes control plane (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, built once from
# Debian's source package and cached: the first run on a machine takes
# minutes) and pykubelet joined to it as a node, authenticated as a real node
# is (CN=system:node:<name>, O=system:nodes, so the Node authorizer and
# NodeRestriction judge it), on a private containerd from the testbed scripts.
# Installs what it needs (scripts/setup.sh: the testbed's Debian packages and
# the project venv). Needs root: as another user it runs itself again through
# sudo. It prints the admin kubeconfig and what to try with kubectl.
#
# Ctrl-C stops pykubelet, then removes what the run created: the pods (through
# CRI), the containerd testbed, the control plane and the run's directory.
# KEEP_TESTBED=1 keeps all of it and prints how to remove it later.
#
# --nodes N (the first argument; 1 to 20): N nodes, each on a test host of its
# own (scripts/testbed/nodehost.sh: a network namespace with its node IP and
# pod CIDR, its pods reaching the other nodes' pods by pod IP), named
# <node name>-1..N, each with its own containerd (PYKUBELET_TESTBED-I), root
# directory, cgroup root and ports, its kubelet in the background with its log
# in PYKUBELET_STATE/<node>/kubelet.log. The API server then listens on the
# machine's address on the test hosts' switch, which pods reach (the
# `kubernetes` Service's endpoint). Once the nodes are Ready, the cluster's
# add-ons start (testsupport/cluster_addons.py, its log in
# PYKUBELET_STATE/addons.log): kube-proxy v1.20.2 on every node, in its
# namespace (Services: ClusterIP, NodePort, session affinity), and the cluster
# DNS (kube-system/kube-dns at 10.96.0.10, cluster.local, which the kubelets'
# clusterDNS name). Without --nodes, the single node runs on the machine
# itself, as it always has, without them (kube-proxy there would rewrite the
# machine's iptables). Ctrl-C removes the test hosts too.
#
# Environment: PYKUBELET_TESTBED (default /tmp/pykubelet-cluster-testbed),
# PYKUBELET_CONTROLPLANE (default /tmp/pykubelet-controlplane),
# PYKUBELET_STATE (default /tmp/pykubelet-cluster), PYKUBELET_NODE_NAME
# (default: the host name, lower-cased), KEEP_TESTBED=1,
# PYKUBELET_K8S_BIN_DIR (use the Kubernetes binaries there; no build).
# Extra arguments go to pykubelet (to each node's).
#
# Every kubelet here runs as the tests' kubelets do (testsupport/kubelet_process.py,
# masked_exec): in a mount namespace of its own where the kernel tunables it sets at
# start-up are files of its directory and its device-plugin directory is one of its
# own, so the machine's /proc/sys and /var/lib/kubelet are never written.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
source scripts/setup.sh
pyk_as_root "$repo/scripts/run-cluster.sh" "$@"

# 0: no --nodes, the single node on the machine itself.
nodes=0
case "${1:-}" in
    --nodes) [[ $# -ge 2 ]] || pyk_die "--nodes needs a number"; nodes=$2; shift 2 ;;
    --nodes=*) nodes=${1#--nodes=}; shift ;;
    *) nodes=none ;;
esac
if [[ "$nodes" == none ]]; then
    nodes=0
elif [[ ! "$nodes" =~ ^[0-9]+$ ]] || ((nodes < 1 || nodes > 20)); then
    pyk_die "--nodes takes a number from 1 to 20, not '$nodes'"
fi

testbed=${PYKUBELET_TESTBED:-/tmp/pykubelet-cluster-testbed}
plane=${PYKUBELET_CONTROLPLANE:-/tmp/pykubelet-controlplane}
state=${PYKUBELET_STATE:-/tmp/pykubelet-cluster}
node=${PYKUBELET_NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}
config=$repo/examples/cluster/kubelet.yaml
# Upstream's fixed directory of per-container log links (log shippers read it).
container_links=/var/log/containers

case "$state" in
    / | /tmp | /usr* | /etc* | /var | /var/lib | /root | /home | "$repo")
        pyk_die "refusing to use $state as PYKUBELET_STATE" ;;
esac

# --- --nodes N: N nodes on test hosts (nodehost.sh) -----------------------------------

# The nodes' names and node IPs: globals, for the EXIT trap.
names=()
node_ips=()

# Usage: run_test_hosts PYKUBELET-ARGS...: the whole run with --nodes. It never returns:
# it exits on Ctrl-C (or when a kubelet exits), and its EXIT trap removes what it made.
run_test_hosts() {
    local indexes=() used i name
    # Indexes no test host on the machine has now (a test may run its own).
    used=" $(bash scripts/testbed/nodehost.sh status | awk '{print $2}' | tr '\n' ' ') "
    for ((i = 1; ${#indexes[@]} < nodes; i++)); do
        [[ "$used" == *" $i "* ]] || indexes+=("$i")
    done
    for ((i = 1; i <= nodes; i++)); do
        names+=("$node-$i")
    done
    [[ "$node" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ && ${#node} -le 58 ]] \
        || pyk_die "node names $node-1.. must be DNS labels: set PYKUBELET_NODE_NAME"

    mkdir -p "$state"
    links_existed=0
    [[ -d "$container_links" ]] && links_existed=1
    trap 'exit 130' INT TERM
    trap 'cleanup_test_hosts' EXIT

    local host_address="" node_ip pod_cidr facts
    for i in "${!names[@]}"; do
        name=${names[$i]}
        facts=$(bash scripts/testbed/nodehost.sh create "$name" "${indexes[$i]}")
        node_ip=$(sed -n 's/^NODE_IP=//p' <<<"$facts")
        pod_cidr=$(sed -n 's/^POD_CIDR=//p' <<<"$facts")
        host_address=$(sed -n 's/^HOST_ADDRESS=//p' <<<"$facts")
        mkdir -p "$state/$name"
        echo "$facts" >"$state/$name/host.env"
        # In the test host's mount namespace too: container logs where its kubelet reads them.
        bash scripts/testbed/containerd.sh start "$testbed-$((i + 1))" \
            --netns "/run/netns/pykn-$name" --pod-subnet "$pod_cidr" \
            --mountns "$(sed -n 's/^NODE_MOUNTNS_PATH=//p' <<<"$facts")"
        sed -e "s#^podLogsDir:.*#podLogsDir: $state/$name/logs#" "$config" >"$state/$name/kubelet.yaml"
        # Two kubelets must not share a cgroup tree; it must exist before the kubelet starts.
        echo "cgroupRoot: /pykubelet-$name" >>"$state/$name/kubelet.yaml"
        # clusterDNS and clusterDomain: the cluster DNS the add-ons start.
        "$PYK_PYTHON" -m testsupport.cluster_addons kubelet-config >>"$state/$name/kubelet.yaml"
        node_ips+=("$node_ip")
    done
    "$PYK_PYTHON" -c 'import sys
from pykubelet.cm.cgroups import CgroupManager, parse_cgroupfs_name
for root in sys.argv[1:]:
    CgroupManager().create(parse_cgroupfs_name(root))' "${names[@]/#//pykubelet-}"

    PYKUBELET_CONTROLPLANE_ADVERTISE_ADDRESS=$host_address \
        bash scripts/testbed/controlplane.sh start "$plane" >/dev/null
    local admin=$plane/admin.kubeconfig kubeconfig
    for i in "${!names[@]}"; do
        name=${names[$i]}
        kubeconfig=$(bash scripts/testbed/controlplane.sh node-credentials "$plane" "$name")
        # setsid: Ctrl-C reaches this script, which stops the kubelets in order.
        # masked: see the header (the host's kernel tunables and device-plugin directory);
        # on the test host (its network and mount namespaces), its root directory shared there.
        setsid bash scripts/testbed/nodehost.sh exec "$name" -- "$PYK_PYTHON" -m testsupport.kubelet_process \
            --base "$state/$name" --root-dir "$state/$name/root" -- "$PYK_PYTHON" -m pykubelet \
            --config "$state/$name/kubelet.yaml" \
            --kubeconfig "$kubeconfig" \
            --client-ca-file "$plane/pki/ca.crt" \
            --hostname-override "$name" \
            --node-ip "${node_ips[$i]}" \
            --container-runtime-endpoint "unix://$testbed-$((i + 1))/containerd.sock" \
            --root-dir "$state/$name/root" \
            --cert-dir "$state/$name/pki" \
            --lock-file "$state/$name/kubelet.lock" \
            --v=2 "$@" </dev/null >>"$state/$name/kubelet.log" 2>&1 &
        echo "$!" >"$state/$name/kubelet.pid"
    done

    local ready=0 deadline=$((SECONDS + 120))
    while ((ready < nodes)); do
        ready=$("$kubectl" --kubeconfig "$admin" get nodes --no-headers 2>/dev/null \
            | awk '$2 == "Ready"' | wc -l)
        kubelets_alive || exit 1
        ((SECONDS < deadline)) || { echo "run-cluster: not every node Ready after 120 s"; break; }
        sleep 1
    done
    echo "run-cluster: $ready of $nodes nodes Ready, $SECONDS s after the start"

    # kube-proxy on every node and the cluster DNS, until this script stops them.
    setsid "$PYK_PYTHON" -m testsupport.cluster_addons run --controlplane "$plane" \
        --dir "$state/addons" "${names[@]}" </dev/null >>"$state/addons.log" 2>&1 &
    echo "$!" >"$state/addons.pid"
    deadline=$((SECONDS + 120))
    until [[ -s "$state/addons/ready" ]]; do
        addons_alive || exit 1
        ((SECONDS < deadline)) || { echo "run-cluster: the add-ons not ready after 120 s"; tail -n 15 "$state/addons.log"; exit 1; }
        sleep 0.5
    done
    echo "run-cluster: $(cat "$state/addons/ready"), $SECONDS s after the start"

    local path_line=""
    # The control plane's own kubectl first on PATH (a machine's may be far off its version).
    [[ "$kubectl" == kubectl ]] || path_line="
    export PATH=${kubectl%/kubectl}:\$PATH"
    cat <<EOF

pykubelet cluster run: $nodes nodes on test hosts (Ctrl-C stops them and removes what the run created)
  admin kubeconfig $admin
  API server       $(sed -n 's/^APISERVER_URL=//p' "$plane/env") (the kubernetes Service's endpoint; pods reach it)
  in another shell:
    export KUBECONFIG=$admin$path_line
    kubectl get nodes -o wide                        # ${names[*]}, Ready
    kubectl apply -f $repo/examples/cluster/deployment.yaml
    kubectl get pods -o wide                         # the pods spread, each in its node's pod CIDR
    kubectl logs deploy/hello                        # through the node's kubelet API on 10250
    kubectl create deployment web --image=pykubelet.local/busybox:1.35 -- httpd -f -p 8080 -h /etc
    kubectl expose deployment web --port 80 --target-port 8080
    kubectl exec deploy/hello -- nslookup web.default.svc.cluster.local    # the cluster DNS
    kubectl exec deploy/hello -- wget -q -O - http://web.default.svc.cluster.local/hostname
  on a node: nsenter --net=/run/netns/pykn-${names[0]} ip route   (its network; hostNetwork pods share it)
  add-ons          kube-proxy and the cluster DNS: $state/addons.log, $state/addons/<node>/kube-proxy.log
EOF
    for i in "${!names[@]}"; do
        name=${names[$i]}
        echo "  $name  node IP ${node_ips[$i]}, pods $(sed -n 's/^POD_CIDR=//p' "$state/$name/host.env"), log $state/$name/kubelet.log, containerd unix://$testbed-$((i + 1))/containerd.sock"
    done
    echo "  control plane logs in $plane/logs/"
    echo
    while kubelets_alive && addons_alive; do
        sleep 1
    done
    exit 1
}

# The add-ons still run; else say so, with their log's last lines.
addons_alive() {
    local pid
    pid=$(cat "$state/addons.pid" 2>/dev/null) || return 0
    kill -0 "$pid" 2>/dev/null && return 0
    echo "run-cluster: the cluster add-ons (kube-proxy, DNS) exited; the end of $state/addons.log:"
    tail -n 15 "$state/addons.log"
    return 1
}

# The kubelets still run; else say which one stopped, with its log's last lines.
kubelets_alive() {
    local name pid
    for name in "${names[@]}"; do
        pid=$(cat "$state/$name/kubelet.pid" 2>/dev/null) || continue
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "run-cluster: the kubelet of $name exited; the end of $state/$name/kubelet.log:"
            tail -n 15 "$state/$name/kubelet.log"
            return 1
        fi
    done
}

cleanup_test_hosts() {
    trap '' INT TERM
    echo
    local name i
    if [[ "${KEEP_TESTBED:-0}" == 1 ]]; then
        echo "run-cluster: KEEP_TESTBED=1: the kubelets, pods, containerds, test hosts, the control"
        echo "plane and $state are kept; remove them with:"
        echo "  kill \$(cat $state/addons.pid)"
        for name in "${names[@]}"; do
            echo "  kill \$(cat $state/$name/kubelet.pid)"
        done
        for i in "${!names[@]}"; do
            echo "  bash scripts/testbed/containerd.sh stop $testbed-$((i + 1))"
        done
        echo "  bash scripts/testbed/controlplane.sh stop $plane"
        for name in "${names[@]}"; do
            echo "  bash scripts/testbed/nodehost.sh delete $name; rmdir /sys/fs/cgroup/*/pykubelet-$name"
        done
        echo "  find $container_links -maxdepth 1 -lname '$state/*' -delete"
        echo "  awk '\$2 ~ \"^$state/\" {print \$2}' /proc/mounts | sort -r | xargs -r -n1 umount; rm -rf $state"
        return
    fi
    echo "run-cluster: removing the add-ons, kubelets, pods, containerds, test hosts, the control plane and $state (please wait)"
    local pids=() pid waited=0
    # The add-ons first (they stop kube-proxy and the DNS server themselves).
    if pid=$(cat "$state/addons.pid" 2>/dev/null); then
        kill -TERM "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do
            ((waited++ < 300)) || { kill -KILL "$pid" 2>/dev/null || true; break; }
            sleep 0.1
        done
        waited=0
    fi
    for name in "${names[@]}"; do
        pid=$(cat "$state/$name/kubelet.pid" 2>/dev/null) && pids+=("$pid")
    done
    if ((${#pids[@]} > 0)); then
        kill -TERM "${pids[@]}" 2>/dev/null || true
        while kill -0 "${pids[@]}" 2>/dev/null; do
            ((waited++ < 200)) || { kill -KILL "${pids[@]}" 2>/dev/null || true; break; }
            sleep 0.1
        done
    fi
    for i in "${!names[@]}"; do
        bash scripts/testbed/containerd.sh stop "$testbed-$((i + 1))" || true
    done
    bash scripts/testbed/controlplane.sh stop "$plane" || true
    "$PYK_PYTHON" -c 'import sys
from pykubelet.cm.cgroups import CgroupManager, parse_cgroupfs_name
for root in sys.argv[1:]:
    CgroupManager().destroy(parse_cgroupfs_name(root))' "${names[@]/#//pykubelet-}" || true
    for name in "${names[@]}"; do
        bash scripts/testbed/nodehost.sh delete "$name" || true
    done
    if [[ -d "$container_links" ]]; then
        find "$container_links" -maxdepth 1 -type l -lname "$state/*" -delete || true
        if [[ $links_existed == 0 ]]; then
            rmdir "$container_links" 2>/dev/null || true
        fi
    fi
    pyk_remove_state "$state"
}

bash scripts/testbed/install.sh
pyk_venv
if [[ -n "${PYKUBELET_K8S_BIN_DIR:-}" ]]; then
    bin_dir=$PYKUBELET_K8S_BIN_DIR
else
    echo "run-cluster: the control plane binaries (built on the first run on a machine: minutes)"
    bin_dir=$(bash scripts/testbed/controlplane-build.sh | tail -n 1)
fi
# The kubectl of the control plane's version when the build has one.
kubectl=kubectl
[[ -x "$bin_dir/kubectl" ]] && kubectl=$bin_dir/kubectl

if ((nodes > 0)); then
    run_test_hosts "$@"
    exit
fi

mkdir -p "$state"
sed -e "s#^podLogsDir:.*#podLogsDir: $state/logs#" "$config" >"$state/kubelet.yaml"
links_existed=0
[[ -d "$container_links" ]] && links_existed=1

cleanup() {
    trap '' INT TERM
    echo
    if [[ "${KEEP_TESTBED:-0}" == 1 ]]; then
        echo "run-cluster: KEEP_TESTBED=1: pods, containerd, the control plane and $state are kept;"
        echo "remove them with:"
        echo "  bash scripts/testbed/controlplane.sh stop $plane"
        echo "  bash scripts/testbed/containerd.sh stop $testbed"
        echo "  find $container_links -maxdepth 1 -lname '$state/*' -delete"
        echo "  awk '\$2 ~ \"^$state/\" {print \$2}' /proc/mounts | sort -r | xargs -r -n1 umount; rm -rf $state"
        return
    fi
    echo "run-cluster: removing the pods, containerd, the control plane and $state (please wait)"
    bash scripts/testbed/controlplane.sh stop "$plane" || true
    bash scripts/testbed/containerd.sh stop "$testbed" || true
    if [[ -d "$container_links" ]]; then
        find "$container_links" -maxdepth 1 -type l -lname "$state/*" -delete || true
        if [[ $links_existed == 0 ]]; then
            rmdir "$container_links" 2>/dev/null || true
        fi
    fi
    pyk_remove_state "$state"
}
trap cleanup EXIT

bash scripts/testbed/containerd.sh start "$testbed"
bash scripts/testbed/controlplane.sh start "$plane" >/dev/null
admin=$plane/admin.kubeconfig
kubeconfig=$(bash scripts/testbed/controlplane.sh node-credentials "$plane" "$node")
socket=$testbed/containerd.sock

cat <<EOF

pykubelet cluster run: node "$node" (Ctrl-C stops it and removes what the run created)
  admin kubeconfig $admin
  in another shell:
    export KUBECONFIG=$admin
    kubectl get nodes -o wide                        # $node is Ready within seconds
    kubectl describe node $node                      # capacity, allocatable, conditions
    kubectl get lease -n kube-node-lease $node       # the heartbeat, renewed every 10 s
    kubectl apply -f $repo/examples/cluster/deployment.yaml
    kubectl get pods -o wide                         # three hello pods on $node
    kubectl logs deploy/hello                        # through the kubelet API on 10250
  node credential  $kubeconfig
  kubelet metrics  kubectl get --raw /api/v1/nodes/$node/proxy/metrics | grep -e ^rest_client -e ^kubelet_
  control plane    logs in $plane/logs/
  containerd       unix://$socket  (its log: $testbed/containerd.log)

EOF
# Not exec: the EXIT trap must run once pykubelet has stopped.
"$PYK_PYTHON" -m testsupport.kubelet_process --base "$state" --root-dir "$state/root" -- \
    "$PYK_PYTHON" -m pykubelet \
    --config "$state/kubelet.yaml" \
    --kubeconfig "$kubeconfig" \
    --client-ca-file "$plane/pki/ca.crt" \
    --hostname-override "$node" \
    --container-runtime-endpoint "unix://$socket" \
    --root-dir "$state/root" \
    --cert-dir "$state/pki" \
    --lock-file "$state/kubelet.lock" \
    --v=2 "$@" || status=$?
exit "${status:-0}"
