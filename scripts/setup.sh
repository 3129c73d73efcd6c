#!/usr/bin/env bash
# Set-up shared by the README's scripts: root, and the project's virtual environment.
#
# pykubelet runs from its own venv (.venv at the top of the checkout), never
# from a system interpreter: Debian's /usr/bin/python3 is externally managed
# (PEP 668) and refuses pip, and installing into whatever python3 comes first
# on PATH would change a machine-wide interpreter behind the user's back. The
# venv is made with any Python >= 3.11 the machine has and holds pykubelet as
# an editable install, so the checkout's code is what runs. pip runs only when
# the venv is new, or pyproject.toml or the wanted extras changed since the
# last install (a stamp file in the venv records them); otherwise set-up costs
# a fraction of a second.
#
# Run it:
#   bash scripts/setup.sh               as root: the testbed's Debian packages
#                                       (scripts/testbed/install.sh) and .venv
#                                       with the test tools; afterwards
#                                       .venv/bin/python runs tests and benchmarks
#   bash scripts/setup.sh --venv-only [EXTRAS]
#                                       only the venv (root only if apt must add
#                                       python3.X-venv); prints its interpreter
# Source it (the other scripts do):
#   pyk_as_root SCRIPT ARGS...   re-run SCRIPT through sudo unless already root
#   pyk_venv [EXTRAS]            make or reuse the venv, put its bin/ first on
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

# The stamp: pyproject.toml's hash, the checkout the editable install points
# at, and the extras installed (comma-separated, sorted).
pyk_stamp_line() {
    local hash
    hash="$(sha256sum "$PYK_REPO/pyproject.toml" | cut -d' ' -f1)"
    echo "pyproject=$hash source=$PYK_REPO"
}

pyk_merge_extras() {
    tr ', ' '\n\n' <<<"$*" | sed '/^$/d' | sort -u | paste -sd, -
}

# Usage: pyk_venv [EXTRAS]   (EXTRAS e.g. "test"; extras installed earlier are kept)
pyk_venv() {
    local wanted venv stamp installed_line installed_extras extras python lock_fd why
    wanted="$(pyk_merge_extras "${1:-}")"
    venv="${PYKUBELET_VENV:-$PYK_REPO/.venv}"
    [[ "$venv" == /* ]] || venv="$PWD/$venv"
    stamp="$venv/$PYK_STAMP_NAME"
    mkdir -p "$(dirname "$venv")"
    # One set-up at a time per directory: concurrent runs would race in pip.
    exec {lock_fd}<"$(dirname "$venv")"
    flock "$lock_fd"

    if [[ ! -x "$venv/bin/python" ]] || ! pyk_python_ok "$venv/bin/python" \
            || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
        python="$(pyk_pick_python)"
        pyk_ensure_ensurepip "$python"
        pyk_log "creating $venv with $python ($("$python" --version 2>&1))"
        "$python" -m venv --clear "$venv" || pyk_die "$python -m venv $venv failed"
    fi

    installed_line="$(sed -n 1p "$stamp" 2>/dev/null || true)"
    installed_extras="$(sed -n 's/^extras=//p' "$stamp" 2>/dev/null || true)"
    extras="$(pyk_merge_extras "$wanted,$installed_extras")"
    if [[ "$installed_line" == "$(pyk_stamp_line)" && "$extras" == "$installed_extras" ]]; then
        pyk_log "$venv is up to date"
    else
        why="first set-up"
        [[ -z "$installed_line" ]] || why="pyproject.toml or the extras changed"
        pyk_log "installing pykubelet${extras:+[$extras]} into $venv ($why)"
        rm -f "$stamp"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            -e "$PYK_REPO${extras:+[$extras]}" || pyk_die "pip install into $venv failed"
        printf '%s\nextras=%s\n' "$(pyk_stamp_line)" "$extras" >"$stamp"
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
        pyk_venv "${2:-}"
        echo "$PYK_PYTHON"
        return
    fi
    pyk_as_root "$PYK_REPO/scripts/setup.sh" "$@"
    bash "$PYK_REPO/scripts/testbed/install.sh"
    pyk_venv test
    pyk_log "ready: $PYK_PYTHON (run benchmarks and tests as root with it, or through scripts/)"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    pyk_setup_main "$@"
fi
