#!/usr/bin/env bash
# The unit tests, the linters and mypy on the newest releases pyproject.toml's
# ranges allow, instead of requirements.lock: a release that breaks pykubelet
# shows up here before scripts/lock.sh --upgrade moves the lock onto it.
#
# Optional and not part of .ci/run (whose result must not change with what
# PyPI published that day). Needs no root and touches neither .venv nor the
# testbed: it makes a throwaway venv, installs `pykubelet[test]` with pip's
# eager upgrade, prints the versions that differ from the lock, and runs
# ruff, mypy and the unit tests there. Extra arguments go to pytest.
#
#   bash scripts/test-newest.sh
#   bash scripts/test-newest.sh -x -k yamlsafe
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

venv="$(mktemp -d /tmp/pykubelet-newest.XXXXXX)"
trap 'rm -rf "$venv"' EXIT
python="$(pyk_pick_python)"
pyk_ensure_ensurepip "$python"
pyk_log "installing the newest pykubelet[test] dependencies into $venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip setuptools
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --upgrade --upgrade-strategy eager -e ".[test]"

echo "== versions that differ from requirements.lock"
"$venv/bin/python" - <<'PY'
import re
from importlib import metadata

from packaging.utils import canonicalize_name

pins = {}
for line in open("requirements.lock"):
    match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
    if match:
        pins[canonicalize_name(match[1])] = match[2]
for dist in sorted(metadata.distributions(), key=lambda d: canonicalize_name(d.metadata["Name"])):
    name = canonicalize_name(dist.metadata["Name"])
    if name in pins and pins[name] != dist.version:
        print(f"  {name}: {pins[name]} locked, {dist.version} newest")
PY

echo "== ruff"
"$venv/bin/python" -m ruff check pykubelet tests bench testsupport
echo "== mypy"
"$venv/bin/python" -m mypy
echo "== pytest (unit)"
# The lock test that compares installed versions with the lock cannot hold here.
"$venv/bin/python" -m pytest -p no:cacheprovider -q tests/unit \
    --deselect tests/unit/test_lock.py::test_the_running_environment_holds_the_locked_versions "$@"
