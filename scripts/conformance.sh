#!/usr/bin/env bash
# The README's conformance command: upstream's own end-to-end suite (e2e.test
# v1.20.2, built with the control plane from Debian's kubernetes source
# package and cached) against a local cluster whose only node is pykubelet,
# configured as scripts/run-cluster.sh runs it; the images the suite asks for
# are built locally and imported, never pulled. Prints a table (test, result,
# seconds) and "N/M passed"; the JUnit reports and the logs are kept.
#
#   scripts/conformance.sh                  the [NodeConformance] tests (not
#                                           Serial, Disruptive, Flaky, Slow, Feature)
#   scripts/conformance.sh --kubelet go     the same with the Go kubelet 1.20 as the node
#   scripts/conformance.sh --compare        both in turn, and the tests whose results differ
#   scripts/conformance.sh --ci             the fixed subset .ci/run runs
#   --focus RE / --skip RE pass through to ginkgo; --parallel N (default 6);
#   --out DIR (default /tmp/pykubelet-conformance-TIME). See testsupport/conformance.py.
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
