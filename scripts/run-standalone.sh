#!/usr/bin/env bash
# The README's run command: pykubelet in standalone mode on its embedded
# defaults. Installs what it needs, starts a local containerd from the testbed
# scripts (temporary root, its own socket, locally built images), then runs
# pykubelet with the example static pods in examples/standalone/manifests.
# Ctrl-C stops pykubelet; the containerd testbed and its pods are cleaned up
# unless KEEP_TESTBED=1.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

if [ "$(id -u)" != 0 ]; then
  echo "scripts/run-standalone.sh: must run as root" >&2
  exit 1
fi

testbed=${PYKUBELET_TESTBED:-/tmp/pykubelet-testbed}
state=${PYKUBELET_STATE:-/tmp/pykubelet-standalone}

bash scripts/testbed/install.sh
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e .
bash scripts/testbed/build-images.sh /tmp/pykubelet-images
bash scripts/testbed/containerd.sh start "$testbed"
if [ "${KEEP_TESTBED:-0}" != 1 ]; then
  trap 'bash scripts/testbed/containerd.sh stop "$testbed"' EXIT
fi

mkdir -p "$state"
echo "pykubelet: static pods from $repo/examples/standalone/manifests"
echo "pykubelet: watch them with: curl -s http://127.0.0.1:10255/pods | python3 -m json.tool"
echo "pykubelet: health:          curl -s http://127.0.0.1:10248/healthz"
pykubelet \
  --config "$repo/examples/standalone/kubelet.yaml" \
  --pod-manifest-path "$repo/examples/standalone/manifests" \
  --container-runtime-endpoint "unix://$testbed/containerd.sock" \
  --root-dir "$state/root" \
  --cert-dir "$state/pki" \
  --lock-file "$state/kubelet.lock" \
  --v=2 "$@"
