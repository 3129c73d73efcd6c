#!/usr/bin/env bash
# Build the two OCI image archives the containerd testbed imports.
#
# Tests must run without a registry, docker or network, so both images are
# made from what is on this machine:
#   OUT_DIR/pause.tar    pykubelet.local/pause:3.9     our own static pause (images/pause.c)
#   OUT_DIR/busybox.tar  pykubelet.local/busybox:1.35  busybox-static with every applet linked
# An archive is rebuilt only when it is missing or older than one of its inputs,
# so repeated test sessions pay nothing.
#
# Usage: build-images.sh OUT_DIR
set -euo pipefail

# Keep in sync with testsupport/testbed.py and containerd.sh.
PAUSE_IMAGE="pykubelet.local/pause:3.9"
BUSYBOX_IMAGE="pykubelet.local/busybox:1.35"
IMAGE_PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
oci_writer="$here/oci_image.py"
pause_source="$here/images/pause.c"

die() { echo "build-images.sh: $*" >&2; exit 1; }

[[ $# -eq 1 ]] || die "usage: build-images.sh OUT_DIR"
out_dir="$1"
mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"

busybox_bin="$(readlink -f /bin/busybox 2>/dev/null || true)"
[[ -x "$busybox_bin" ]] || die "/bin/busybox missing; run scripts/testbed/install.sh (busybox-static)"
command -v gcc >/dev/null || die "gcc missing; run scripts/testbed/install.sh"
command -v python3 >/dev/null || die "python3 missing"

# True when $1 is missing or older than any of the remaining paths.
stale() {
    local target="$1"; shift
    [[ -s "$target" ]] || return 0
    local input
    for input in "$@"; do
        [[ "$input" -nt "$target" ]] && return 0
    done
    return 1
}

work="$(mktemp -d /tmp/pykubelet-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT

build_pause() {
    local rootfs="$work/pause"
    mkdir -p "$rootfs"
    # -s strips symbols: the image should be as small as the upstream pause.
    gcc -static -Os -s -Wall -Werror -o "$rootfs/pause" "$pause_source" \
        || die "compiling $pause_source failed (is libc6-dev installed?)"
    chmod 0755 "$rootfs/pause"
    python3 "$oci_writer" --rootfs "$rootfs" --name "$PAUSE_IMAGE" --out "$out_dir/pause.tar" \
        --entrypoint '["/pause"]' --env "PATH=$IMAGE_PATH"
}

build_busybox() {
    local rootfs="$work/busybox" applet
    mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,etc,root,var/www,dev,proc,sys}
    install -m 0755 "$busybox_bin" "$rootfs/bin/busybox"
    # --list-full gives each applet's conventional directory (bin/sh, usr/bin/wget, ...).
    while read -r applet; do
        [[ -n "$applet" && "$applet" != "bin/busybox" ]] || continue
        mkdir -p "$rootfs/$(dirname "$applet")"
        [[ -e "$rootfs/$applet" ]] || ln -s /bin/busybox "$rootfs/$applet"
    done < <("$busybox_bin" --list-full)
    [[ -L "$rootfs/bin/sh" ]] || die "busybox does not provide sh"
    install -d -m 1777 "$rootfs/tmp"
    install -d -m 0700 "$rootfs/root"
    cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
    cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
EOF
    chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
    python3 "$oci_writer" --rootfs "$rootfs" --name "$BUSYBOX_IMAGE" \
        --out "$out_dir/busybox.tar" --cmd '["sh"]' --env "PATH=$IMAGE_PATH"
}

if stale "$out_dir/pause.tar" "$pause_source" "$oci_writer" "${BASH_SOURCE[0]}"; then
    build_pause
    echo "built $out_dir/pause.tar ($PAUSE_IMAGE)"
fi
if stale "$out_dir/busybox.tar" "$busybox_bin" "$oci_writer" "${BASH_SOURCE[0]}"; then
    build_busybox
    echo "built $out_dir/busybox.tar ($BUSYBOX_IMAGE)"
fi
