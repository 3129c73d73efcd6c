#!/usr/bin/env bash
# The README's cluster command: a real Kubernetes control plane (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, built once from
# Debian's source package and cached) and pykubelet joined to it as a node
# with a node credential (CN=system:node:<name>, O=system:nodes), on a local
# containerd from the testbed scripts. Prints the admin kubeconfig and what
# to try with kubectl. Ctrl-C stops pykubelet, then the control plane and the
# containerd testbed (KEEP_TESTBED=1 keeps both).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

if [ "$(id -u)" != 0 ]; then
  exec sudo -E bash "$0" "$@"
fi

testbed=${PYKUBELET_TESTBED:-/tmp/pykubelet-cluster-testbed}
plane=${PYKUBELET_CONTROLPLANE:-/tmp/pykubelet-controlplane}
state=${PYKUBELET_STATE:-/tmp/pykubelet-cluster}
node=${PYKUBELET_NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}

bash scripts/testbed/install.sh
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e .
bash scripts/testbed/build-images.sh /tmp/pykubelet-images
echo "pykubelet: the control plane binaries (the first build on a machine takes minutes)"
bash scripts/testbed/controlplane-build.sh >/dev/null

cleanup() {
  if [ "${KEEP_TESTBED:-0}" != 1 ]; then
    bash scripts/testbed/controlplane.sh stop "$plane" || true
    bash scripts/testbed/containerd.sh stop "$testbed" || true
  fi
}
trap cleanup EXIT
bash scripts/testbed/containerd.sh start "$testbed"
bash scripts/testbed/controlplane.sh start "$plane"
admin="$plane/admin.kubeconfig"
kubeconfig=$(bash scripts/testbed/controlplane.sh node-credentials "$plane" "$node")

mkdir -p "$state"
cat <<MSG
pykubelet: joining the cluster as node "$node"
pykubelet: the admin kubeconfig is $admin; in another shell:
  export KUBECONFIG=$admin
  kubectl get nodes -o wide                        # $node becomes Ready within seconds
  kubectl describe node $node                      # capacity, allocatable, conditions
  kubectl get lease -n kube-node-lease $node       # the heartbeat, renewed every 10 s
  kubectl apply -f $repo/examples/cluster/deployment.yaml
  kubectl get pods -o wide                         # three hello pods on $node
pykubelet: Ctrl-C stops pykubelet, the control plane and containerd
MSG
status=0
pykubelet \
  --config "$repo/examples/cluster/kubelet.yaml" \
  --kubeconfig "$kubeconfig" \
  --hostname-override "$node" \
  --container-runtime-endpoint "unix://$testbed/containerd.sock" \
  --root-dir "$state/root" \
  --lock-file "$state/kubelet.lock" \
  --v=2 "$@" || status=$?
exit "$status"
