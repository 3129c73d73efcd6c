#!/usr/bin/env bash
# Install what the containerd testbed needs on Debian bookworm (run as root).
#
# Idempotent and quiet: packages already installed are left alone, and the
# package lists are refreshed only when something is actually missing, so CI
# and developers can call this before every test run at almost no cost.
set -euo pipefail

PACKAGES=(
    containerd                   # the CRI runtime under test (1.6 on bookworm)
    runc                         # OCI runtime used by containerd-shim-runc-v2
    containernetworking-plugins  # bridge, host-local, portmap, loopback in /usr/lib/cni
    busybox-static               # userland of the busybox test image
    gcc libc6-dev                # compile the static pause binary
    iptables iproute2            # used by the CNI plugins and by cleanup
    docker-registry skopeo       # the testbed registry (registry.sh) and pushing images into it
    apache2-utils                # htpasswd: the registry's bcrypt password file
    openssl                      # the registry's CA and serving certificate
    prometheus                   # scrapes the kubelet API's metrics in the tests, as in a cluster
    libbsd0                      # netcat-openbsd's library, for the e2e agnhost image
    curl                         # the e2e agnhost image's curl; controlplane.sh's health checks
    unbound python3-unbound      # the cluster DNS (dns.sh, testsupport/cluster_dns.py) and the
                                 # Python module its pod records are answered by
    bind9-dnsutils               # dig: the tests ask the cluster DNS over UDP and TCP
    conntrack                    # kube-proxy's conntrack clean-up
)

die() { echo "install.sh: error: $*" >&2; exit 1; }

[[ $EUID -eq 0 ]] || die "must run as root"
command -v apt-get >/dev/null || die "apt-get not found; this script supports Debian bookworm"

missing=()
for package in "${PACKAGES[@]}"; do
    status="$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)"
    [[ "$status" == "install ok installed" ]] || missing+=("$package")
done

if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi

echo "install.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt_log="$(mktemp /tmp/pykubelet-install.XXXXXX.log)"
if ! apt-get update -qq >"$apt_log" 2>&1; then
    tail -n 20 "$apt_log" >&2
    die "apt-get update failed (full log: $apt_log)"
fi
if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$apt_log" 2>&1; then
    tail -n 20 "$apt_log" >&2
    die "apt-get install ${missing[*]} failed (full log: $apt_log)"
fi
rm -f "$apt_log"

# The Debian package enables the host containerd service; the testbed runs its
# own daemon and does not need it, but leaving it running is harmless.
# Not so unbound's: a recursive resolver on the host's port 53 that, with
# resolvconf, becomes the host's own resolver. The testbed runs unbound with
# a private configuration only, so a host service this run installed is
# stopped and disabled again (a machine that had unbound before keeps it as it was).
if [[ " ${missing[*]} " == *" unbound "* && -d /run/systemd/system ]]; then
    systemctl disable --now --quiet unbound.service unbound-resolvconf.service 2>/dev/null || true
fi
for tool in containerd runc ctr gcc docker-registry skopeo htpasswd openssl unbound \
        unbound-control dig conntrack curl; do
    command -v "$tool" >/dev/null || die "$tool still missing after installing packages"
done
[[ -x /usr/lib/cni/bridge ]] || die "/usr/lib/cni/bridge missing after installing packages"
[[ -x /bin/busybox ]] || die "/bin/busybox missing after installing packages"
[[ -f /usr/lib/python3/dist-packages/unboundmodule.py ]] \
    || die "unboundmodule.py (python3-unbound) missing after installing packages"
echo "install.sh: done"
