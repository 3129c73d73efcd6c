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
# Environment: PYKUBELET_TESTBED (default /tmp/pykubelet-cluster-testbed),
# PYKUBELET_CONTROLPLANE (default /tmp/pykubelet-controlplane),
# PYKUBELET_STATE (default /tmp/pykubelet-cluster), PYKUBELET_NODE_NAME
# (default: the host name, lower-cased), KEEP_TESTBED=1.
# Extra arguments go to pykubelet.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
source scripts/setup.sh
pyk_as_root "$repo/scripts/run-cluster.sh" "$@"

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

bash scripts/testbed/install.sh
pyk_venv
echo "run-cluster: the control plane binaries (built on the first run on a machine: minutes)"
bash scripts/testbed/controlplane-build.sh >/dev/null

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
