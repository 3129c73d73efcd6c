#!/usr/bin/env bash
# Refresh requirements.lock: every package the project venv holds (runtime,
# test tools, and the build backend of the editable install), at exact
# versions with the hashes of all their published files.
#
# pyproject.toml keeps version ranges, for people who `pip install .` into an
# environment of their own; the lock is what scripts/setup.sh installs into
# .venv, so every machine (a developer's, CI, a new user's) runs the same
# versions until this script is run again. Run it when pyproject.toml's
# dependencies change (tests/unit/test_lock.py fails until you do), or on
# purpose to take newer releases, after scripts/test-newest.sh has shown that
# they pass. Commit the new lock with the changes it needs.
#
# The lock is universal: uv resolves it once for every Python >= 3.11 and
# every platform, writing environment markers where a dependency differs,
# and records the hashes of every wheel and sdist of each pinned version, so
# the same file installs on x86_64 and aarch64, Python 3.11 to 3.14. Only
# this script needs uv (a pinned version, in a throwaway venv); installing
# from the lock needs nothing but pip.
#
#   bash scripts/lock.sh            rewrite requirements.lock
#   bash scripts/lock.sh --upgrade  also move pinned packages to newer releases
#                                   (without it, versions already in the lock
#                                   are kept where they still satisfy the ranges)
set -euo pipefail

UV_VERSION=0.13.9
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCK="$REPO/requirements.lock"

upgrade=()
case "${1:-}" in
    "") ;;
    --upgrade) upgrade=(--upgrade) ;;
    *) echo "usage: $0 [--upgrade]" >&2; exit 2 ;;
esac

tool_dir="$(mktemp -d /tmp/pykubelet-lock.XXXXXX)"
trap 'rm -rf "$tool_dir"' EXIT
python3 -m venv "$tool_dir/venv"
"$tool_dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"

# The build backend (pyproject's [build-system] requires) is locked too: the
# editable install runs without build isolation, from the locked setuptools.
build_requires="$(python3 - "$REPO/pyproject.toml" <<'PY'
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["build-system"]["requires"]))
PY
)"

cd "$REPO"
# Paths in the lock's comments are relative to the checkout, so the file does
# not depend on where it was made.
printf '%s\n' "$build_requires" >"$tool_dir/build-system.in"
"$tool_dir/venv/bin/uv" pip compile --quiet --universal --python-version 3.11 \
    --generate-hashes --extra test --no-header --output-file "$LOCK" "${upgrade[@]}" \
    pyproject.toml "$tool_dir/build-system.in"
# uv names the temporary input file in its "via" comments; say what it was.
sed -i "s|$tool_dir/build-system.in|pyproject.toml [build-system]|" "$LOCK"
sed -i '1i # Written by scripts/lock.sh (uv '"$UV_VERSION"'): do not edit; run the script.' "$LOCK"
echo "lock.sh: wrote $LOCK ($(grep -c '^[a-z0-9]' "$LOCK") packages)"
