#!/usr/bin/env bash
# The README's run command: pykubelet in standalone mode on its embedded
# defaults. Installs what it needs (scripts/setup.sh: the testbed's Debian
# packages and the project venv), starts a private containerd from the testbed
# scripts (temporary root, its own socket, locally built images), then runs
# pykubelet from the venv with the example static pods in
# examples/standalone/manifests. Needs root: as another user it runs itself
# again through sudo.
#
# Ctrl-C stops pykubelet, which leaves its pods running as the Go kubelet does;
# the script then removes what the run created: the pods (through CRI, so CNI
# releases their IPs), the containerd testbed, the run's directory and the
# /var/log/containers links into it. KEEP_TESTBED=1 keeps all of it and prints
# how to remove it later. What stays on purpose: .venv and the image archives
# in /tmp/pykubelet-images (reused by the next run), and the CNI lease
# directory /var/lib/cni/networks/pykubelet, which every testbed on the
# machine shares (see scripts/testbed/containerd.sh).
# Environment: PYKUBELET_TESTBED (default /tmp/pykubelet-testbed),
# PYKUBELET_STATE (default /tmp/pykubelet-standalone), KEEP_TESTBED=1.
# Extra arguments go to pykubelet.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
source scripts/setup.sh
pyk_as_root "$repo/scripts/run-standalone.sh" "$@"

testbed=${PYKUBELET_TESTBED:-/tmp/pykubelet-testbed}
state=${PYKUBELET_STATE:-/tmp/pykubelet-standalone}
config=$repo/examples/standalone/kubelet.yaml
manifests=$repo/examples/standalone/manifests
# Upstream's fixed directory of per-container log links (log shippers read it).
container_links=/var/log/containers

case "$state" in
    / | /tmp | /usr* | /etc* | /var | /var/lib | /root | /home | "$repo") 
        pyk_die "refusing to use $state as PYKUBELET_STATE" ;;
esac

bash scripts/testbed/install.sh
pyk_venv

# Everything the run writes goes under $state; the config's podLogsDir is the
# only path pykubelet takes from the file, so it is rewritten to follow $state.
mkdir -p "$state"
sed -e "s#^podLogsDir:.*#podLogsDir: $state/logs#" "$config" >"$state/kubelet.yaml"
links_existed=0
[[ -d "$container_links" ]] && links_existed=1

cleanup() {
    trap '' INT TERM
    echo
    if [[ "${KEEP_TESTBED:-0}" == 1 ]]; then
        echo "run-standalone: KEEP_TESTBED=1: pods, containerd and $state are kept; remove them with:"
        echo "  bash scripts/testbed/containerd.sh stop $testbed"
        echo "  find $container_links -maxdepth 1 -lname '$state/*' -delete"
        echo "  awk '\$2 ~ \"^$state/\" {print \$2}' /proc/mounts | sort -r | xargs -r -n1 umount; rm -rf $state"
        return
    fi
    echo "run-standalone: removing the pods, the containerd testbed and $state (please wait)"
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

node=$(hostname | tr '[:upper:]' '[:lower:]')
socket=$testbed/containerd.sock
cat <<EOF

pykubelet standalone run (Ctrl-C stops it and removes what the run created)
  static pods      $manifests
                   (edit or add a file: picked up at once; pod names get the suffix -$node)
  pods and status  curl -s http://127.0.0.1:10255/pods | python3 -m json.tool
  health           curl -s http://127.0.0.1:10248/healthz
  pod directories  $state/root/pods/<pod uid>/
  pod logs         $state/logs/<namespace>_<pod>_<uid>/<container>/<restart>.log
                   (linked as $container_links/<pod>_<namespace>_<container>-<id>.log)
  containerd       unix://$socket  (its log: $testbed/containerd.log)
  the runtime's view:
    .venv/bin/python scripts/testbed/cri_tool.py ps $socket
    ctr --address $socket -n k8s.io containers ls
    ctr --address $socket -n k8s.io tasks ls

EOF
# Not exec: the EXIT trap must run once pykubelet has stopped.
"$PYK_PYTHON" -m pykubelet \
    --config "$state/kubelet.yaml" \
    --pod-manifest-path "$manifests" \
    --container-runtime-endpoint "unix://$socket" \
    --root-dir "$state/root" \
    --cert-dir "$state/pki" \
    --lock-file "$state/kubelet.lock" \
    --v=2 "$@" || status=$?
exit "${status:-0}"
