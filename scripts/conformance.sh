#!/usr/bin/env bash
# The README's conformance command: upstream's own end-to-end suite (e2e.test
# v1.20.2, built with the control plane from Debian's kubernetes source
# package and cached) against a local cluster whose nodes are pykubelet,
# configured as scripts/run-cluster.sh runs it (or the Go kubelet 1.20, or
# both); the images the suite asks for are built locally and imported into
# every node's containerd, never pulled. The suite's [Serial] tests run after
# the others, on one ginkgo node. Prints one table (test, result, seconds) and
# "N/M passed"; the JUnit reports and the logs are kept.
#
#   scripts/conformance.sh                    the [NodeConformance] tests ([Slow] ones
#                                             too; not Serial, Disruptive, Flaky, Feature)
#                                             on one node on this machine
#   scripts/conformance.sh --suite conformance
#                                             all 311 [Conformance] tests on 2 test hosts
#                                             (network namespaces with their own node IP,
#                                             containerd and kubelet; kube-proxy and
#                                             cluster DNS): the parallel ones, then [Serial]
#   scripts/conformance.sh --suite kubelet-conformance   sig-node's other [Conformance]
#                                             tests, sig-storage's on the kubelet's volumes
#   scripts/conformance.sh --suite kubelet-extended      untagged and [NodeFeature:...]
#                                             kubelet tests (security context, probes,
#                                             PreStop, port-forward, cp, sysctls, fsGroup,
#                                             in-tree emptyDir and hostPath volumes)
#   scripts/conformance.sh --ci               the fixed subset .ci/run runs
#   --nodes N                                 N test hosts (any suite; without it the
#                                             node suites and --ci run one node on this
#                                             machine, --suite conformance 2 test hosts)
#   --kubelet go                              every node the Go kubelet 1.20
#   --kubelet mixed                           the Go kubelet on node 1, pykubelet on the
#                                             others (test hosts; 2 unless --nodes)
#   --compare                                 pykubelet (or with --kubelet mixed the mixed
#                                             cluster), then the Go kubelet, and the tests
#                                             whose results differ
#   --focus RE / --skip RE pass through to ginkgo; --parallel N ginkgo nodes of the
#   parallel phase (default 6); --out DIR (default /tmp/pykubelet-conformance-TIME).
#   What no suite runs (the testbed cannot serve it by construction) is listed with
#   its reason in SKIPPED_BY_CONSTRUCTION, testsupport/conformance.py.
#
# Installs what it needs (scripts/setup.sh). Needs root: as another user it
# runs itself again through sudo. Exit 0 when every selected test passed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
pyk_as_root "$PWD/scripts/conformance.sh" "$@"

bash scripts/testbed/install.sh
pyk_venv
echo "conformance: the control plane and e2e.test (built on the first run on a machine: minutes)" >&2
bash scripts/testbed/controlplane-build.sh >/dev/null
exec "$PYK_PYTHON" -m testsupport.conformance "$@"
