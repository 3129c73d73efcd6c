#!/usr/bin/env bash
# Run one benchmark of bench/ on the project venv: bash scripts/bench.sh NAME [ARGS...]
# NAME is a benchmark of bench/ (pod_startup, probes, kubelet_api, peer, soak, faults...),
# run as the module bench.NAME from the checkout root; ARGS go to it (see bench/README.md),
# e.g. bash scripts/bench.sh faults --kubelet pykubelet --minutes 4.
# Needs root (containerd): as another user it runs itself again through sudo.
# Installs what it needs first, as scripts/test.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

usage() {
    echo "usage: bash scripts/bench.sh NAME [ARGS...]   (NAME: $(cd bench && ls -- *.py \
        | sed -e '/^__init__/d' -e 's/\.py$//' | paste -sd' ' -))" >&2
    exit 2
}
[[ $# -ge 1 && "$1" != -* && -f "bench/$1.py" && "$1" != __init__ ]] || usage
pyk_as_root "$PWD/scripts/bench.sh" "$@"

name="$1"
shift
bash scripts/testbed/install.sh
pyk_venv
exec "$PYK_PYTHON" -m "bench.$name" "$@"
