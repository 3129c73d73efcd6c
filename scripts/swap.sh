#!/usr/bin/env bash
# The in-place swap of a node's kubelet, both ways (issue 38): a node run by the
# Go kubelet 1.20 (built with the control plane from Debian's kubernetes source
# package, cached) with pods of every kind of interest (emptyDir, configMap,
# secret, projected and hostPath volumes, probes, a crash loop, a static pod, a
# Guaranteed pod with an exclusive CPU), then the Go kubelet stopped and
# pykubelet started with the same configuration file, root and certificate
# directories, kubeconfig, runtime socket, cgroup root and node name, then back.
# Prints, for each direction, a table per container (container IDs, restart
# counts and sandboxes before and after) and the checks (an emptyDir file kept,
# a configMap update propagated, a readiness change reported, a new pod
# started). Everything it starts (a private containerd, a control plane, the
# kubelets, their pods, mounts and cgroups) is removed at the end.
#
#   scripts/swap.sh                      about 10 pods
#   scripts/swap.sh --fillers 22         about 30 pods
#   scripts/swap.sh --no-cpu-manager     no static CPU manager (no exclusive-CPU pod)
#   scripts/swap.sh --device-plugin      also upstream's sample device plugin and a pod
#                                        holding one of its devices
#   --report-dir DIR                     where the tables, the CRI and disk snapshots
#                                        of every phase and both kubelets' logs go
#                                        (default /tmp/pykubelet-swap-report-XXXXXX)
#
# Installs what it needs (scripts/setup.sh). Needs root: as another user it runs
# itself again through sudo. Exit 0 when no container changed but the crash
# loop's and every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
pyk_as_root "$PWD/scripts/swap.sh" "$@"

bash scripts/testbed/install.sh
pyk_venv
echo "swap: the control plane and the Go kubelet (built on the first run on a machine: minutes)" >&2
bash scripts/testbed/controlplane-build.sh >/dev/null
exec "$PYK_PYTHON" -m testsupport.swap "$@"
