#!/usr/bin/env bash
# The README's test command: installs everything the tests need (apt and pip),
# runs the linters and the whole test suite, including the integration tests
# that start a real containerd (scripts/testbed) in a temporary root and a
# real Kubernetes control plane built from Debian's source package.
# Must run as root on Debian bookworm. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "scripts/test.sh: must run as root (containerd, network namespaces, mounts)" >&2
  exit 1
fi

bash scripts/testbed/install.sh
# The real control plane for the cluster-mode tests: built from Debian's
# kubernetes source package on first use (minutes), cached afterwards.
bash scripts/testbed/controlplane-build.sh >/dev/null
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e '.[test]'

echo "== ruff"
python3 -m ruff check pykubelet tests bench
echo "== mypy"
python3 -m mypy
echo "== pytest"
python3 -m pytest -p no:cacheprovider -q "$@"
