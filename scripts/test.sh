#!/usr/bin/env bash
# The README's test command: the linters and the whole test suite, including
# the integration tests that start a real containerd (scripts/testbed) in a
# temporary root, and a real Kubernetes control plane built from Debian's
# source package. Needs root on Debian bookworm: run as another user, it runs
# itself again through sudo. Installs what it needs: the testbed's Debian
# packages and the project venv .venv with requirements.lock's exact versions
# (scripts/setup.sh; pip runs only when the lock or pyproject.toml changed).
# Ruff, mypy and pytest run on the venv's interpreter, so the integration
# tests' `python -m pykubelet` does too.
# Then, when no arguments were given (the whole suite, as .ci/run runs it),
# the CI subset of upstream's own e2e suite against pykubelet as a cluster
# node (scripts/conformance.sh --ci: 27 tests, about 3 min).
# Extra arguments go to pytest (and skip the e2e subset).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
pyk_as_root "$PWD/scripts/test.sh" "$@"

bash scripts/testbed/install.sh
# The real control plane for the cluster-mode tests: built from Debian's
# kubernetes source package on first use (minutes), cached afterwards.
bash scripts/testbed/controlplane-build.sh >/dev/null
pyk_venv

echo "== ruff"
"$PYK_PYTHON" -m ruff check pykubelet tests bench testsupport
echo "== mypy"
"$PYK_PYTHON" -m mypy
echo "== pytest"
"$PYK_PYTHON" -m pytest -p no:cacheprovider -q "$@"
if [[ $# -eq 0 ]]; then
    echo "== upstream e2e.test, the CI subset (scripts/conformance.sh --ci)"
    "$PYK_PYTHON" -m testsupport.conformance --ci
fi
