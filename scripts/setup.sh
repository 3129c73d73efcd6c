#!/usr/bin/env bash
# Set-up shared by the README's scripts: root, and the project's virtual environment.
#
# pykubelet runs from its own venv (.venv at the top of the checkout), never
# from a system interpreter: Debian's /usr/bin/python3 is externally managed
# (PEP 668) and refuses pip, and installing into whatever python3 comes first
# on PATH would change a machine-wide interpreter behind the user's back. The
# venv is made with any Python >= 3.11 the machine has and holds exactly the
# packages of requirements.lock (runtime, test tools and the build backend, at
# the versions and hashes scripts/lock.sh wrote), plus pykubelet as an
# editable install, so the checkout's code is what runs. pip runs only when
# the venv is new or the lock or pyproject.toml changed since the last install
# (a stamp file in the venv records their hashes); then the venv is made anew,
# so nothing outside the lock stays in it. Otherwise set-up costs a fraction
# of a second.
#
# Run it:
#   bash scripts/setup.sh               as root: the testbed's Debian packages
#                                       (scripts/testbed/install.sh) and .venv;
#                                       afterwards .venv/bin/python runs tests
#                                       and benchmarks
#   bash scripts/setup.sh --venv-only   only the venv (root only if apt must
#                                       add python3.X-venv); prints its
#                                       interpreter
# Source it (the other scripts do):
#   pyk_as_root SCRIPT ARGS...   re-run SCRIPT through sudo unless already root
#   pyk_venv                     make or reuse the venv, put its bin/ first on
#                                PATH, set PYK_PYTHON to its interpreter
# Environment:
#   PYKUBELET_PYTHON   interpreter to create the venv with (default: the first
#                      of python3, python3.13 ... python3.11 on PATH that is
#                      >= 3.11, then /usr/bin/python3)
#   PYKUBELET_VENV     where the venv lives (default: <checkout>/.venv)

PYK_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYK_STAMP_NAME=".pykubelet-install"
PYK_PYTHON=""

pyk_log() { echo "setup: $*" >&2; }
pyk_die() { pyk_log "error: $*"; exit 1; }

# Usage: pyk_remove_state DIR
# Removes a run's directory. Pods outlive pykubelet, so their tmpfs volumes
# (secrets, tokens, memory emptyDirs) may still be mounted under it: those are
# unmounted first, deepest first, or rm would stop at them.
pyk_remove_state() {
    local dir=$1 mount
    awk -v prefix="$dir/" 'index($2, prefix) == 1 { print $2 }' /proc/mounts | sort -r |
        while read -r mount; do umount "$mount" || umount -l "$mount" || true; done
    rm -rf "$dir"
}

# Usage: pyk_as_root SCRIPT ARGS...
# Root is needed for containerd, network namespaces and mounts. A user who is
# not root gets the same command again through sudo, with the PYKUBELET_* and
# KEEP_TESTBED settings carried over (sudo resets the environment).
pyk_as_root() {
    [[ $EUID -eq 0 ]] && return 0
    local script="$1"
    shift
    command -v sudo >/dev/null \
        || pyk_die "$(basename "$script") must run as root (and sudo is not installed)"
    local settings=() name
    for name in $(compgen -e); do
        if [[ "$name" == PYKUBELET_* || "$name" == KEEP_TESTBED ]]; then
            settings+=("$name=${!name}")
        fi
    done
    pyk_log "not root: running $(basename "$script") through sudo"
    exec sudo env "${settings[@]}" bash "$script" "$@"
}

pyk_python_ok() {
    "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

pyk_pick_python() {
    if [[ -n "${PYKUBELET_PYTHON:-}" ]]; then
        pyk_python_ok "$PYKUBELET_PYTHON" \
            || pyk_die "PYKUBELET_PYTHON=$PYKUBELET_PYTHON is not a working Python >= 3.11"
        echo "$PYKUBELET_PYTHON"
        return
    fi
    local candidate found
    for candidate in python3 python3.14 python3.13 python3.12 python3.11 /usr/bin/python3; do
        found="$(command -v "$candidate" 2>/dev/null)" || continue
        if pyk_python_ok "$found"; then
            echo "$found"
            return
        fi
    done
    pyk_die "no Python >= 3.11 found (tried python3, python3.1x on PATH and /usr/bin/python3);" \
        "on Debian bookworm: apt-get install python3"
}

# Debian splits venv's pip bootstrap (ensurepip) into python3.X-venv.
pyk_ensure_ensurepip() {
    local python="$1" version apt_log
    "$python" -c 'import ensurepip' >/dev/null 2>&1 && return 0
    version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    command -v apt-get >/dev/null \
        || pyk_die "$python cannot create a venv with pip (no ensurepip) and apt-get is missing"
    [[ $EUID -eq 0 ]] \
        || pyk_die "$python needs the Debian package python$version-venv; run as root to install it"
    pyk_log "installing python$version-venv (Debian's venv support for $python)"
    apt_log="$(mktemp /tmp/pykubelet-setup.XXXXXX.log)"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "python$version-venv" >"$apt_log" 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >>"$apt_log" 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "python$version-venv" >>"$apt_log" 2>&1 \
            || { tail -n 20 "$apt_log" >&2; pyk_die "apt-get install python$version-venv failed"; }
    fi
    rm -f "$apt_log"
}

# The stamp: the hashes of the lock and of what pyproject.toml says about the
# install (its [project] and [build-system] tables: entry points, packages,
# dependencies; not the tools' settings, whose edits need no new venv), and the
# checkout the editable install points at.
pyk_stamp_line() {
    local lock_hash project_hash
    lock_hash="$(sha256sum "$PYK_REPO/requirements.lock" | cut -d' ' -f1)"
    project_hash="$("$(pyk_pick_python)" - "$PYK_REPO/pyproject.toml" <<'PY'
import hashlib
import json
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)
install = {key: project.get(key) for key in ("project", "build-system")}
print(hashlib.sha256(json.dumps(install, sort_keys=True).encode()).hexdigest())
PY
)"
    echo "lock=$lock_hash pyproject=$project_hash source=$PYK_REPO"
}

# Usage: pyk_venv
pyk_venv() {
    local venv stamp installed_line python lock_fd why
    venv="${PYKUBELET_VENV:-$PYK_REPO/.venv}"
    [[ "$venv" == /* ]] || venv="$PWD/$venv"
    stamp="$venv/$PYK_STAMP_NAME"
    mkdir -p "$(dirname "$venv")"
    # One set-up at a time per directory: concurrent runs would race in pip.
    exec {lock_fd}<"$(dirname "$venv")"
    flock "$lock_fd"

    installed_line="$(sed -n 1p "$stamp" 2>/dev/null || true)"
    if [[ -x "$venv/bin/python" ]] && pyk_python_ok "$venv/bin/python" \
            && [[ "$installed_line" == "$(pyk_stamp_line)" ]]; then
        pyk_log "$venv is up to date"
    else
        why="first set-up"
        [[ -z "$installed_line" ]] || why="requirements.lock or pyproject.toml changed"
        python="$(pyk_pick_python)"
        pyk_ensure_ensurepip "$python"
        pyk_log "creating $venv with $python ($("$python" --version 2>&1)) and installing" \
            "pykubelet with requirements.lock ($why)"
        "$python" -m venv --clear "$venv" || pyk_die "$python -m venv $venv failed"
        # Every package at its locked version and hash; --no-deps because the
        # lock already holds the whole tree. Then pykubelet itself, built with
        # the locked setuptools rather than whatever an isolated build would
        # download that day.
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            --require-hashes --no-deps -r "$PYK_REPO/requirements.lock" \
            || pyk_die "pip install -r requirements.lock into $venv failed"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            --no-deps --no-build-isolation -e "$PYK_REPO" \
            || pyk_die "pip install -e $PYK_REPO into $venv failed"
        "$venv/bin/python" -m pip check >&2 \
            || pyk_die "the packages in $venv do not fit together (pip check); run scripts/lock.sh"
        pyk_stamp_line >"$stamp"
    fi
    exec {lock_fd}<&-

    PYK_PYTHON="$venv/bin/python"
    export VIRTUAL_ENV="$venv"
    # The testbed scripts run python3 from PATH (cri_tool.py needs grpc).
    export PATH="$venv/bin:$PATH"
}

pyk_setup_main() {
    set -euo pipefail
    if [[ "${1:-}" == --venv-only ]]; then
        pyk_venv
        echo "$PYK_PYTHON"
        return
    fi
    pyk_as_root "$PYK_REPO/scripts/setup.sh" "$@"
    bash "$PYK_REPO/scripts/testbed/install.sh"
    pyk_venv
    pyk_log "ready: $PYK_PYTHON (run benchmarks and tests as root with it, or through scripts/)"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    pyk_setup_main "$@"
fi
