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
# With --e2e BIN_DIR (the control-plane cache, controlplane-build.sh), also the
# images upstream's e2e suite v1.20.2 asks for (test/utils/image/manifest.go,
# its default registries), under exactly those names, into OUT_DIR/e2e/:
#   k8s.gcr.io/e2e-test-images/agnhost:2.21     the tree's agnhost program on busybox
#                                               (entrypoint /agnhost, cmd pause, as upstream;
#                                               curl is a STAND-IN: busybox wget behind a
#                                               script that takes curl's common options;
#                                               nc is Debian's netcat-openbsd, as upstream's,
#                                               since busybox's has no UDP, and sh is Debian's
#                                               dash, with their libraries)
#   docker.io/library/busybox:1.29              the busybox image above, renamed
#   docker.io/library/nginx:1.14-alpine, :1.15-alpine, docker.io/library/httpd:2.4.38-alpine,
#   :2.4.39-alpine                              STAND-INS: busybox httpd serving /var/www on
#                                               port 80 (the selected tests only need a
#                                               long-running web server; no nginx or Apache)
#   gcr.io/kubernetes-e2e-test-images/nonewprivs:1.0  the tree's nnp program, setuid root
#   gcr.io/kubernetes-e2e-test-images/nonroot:1.0     busybox with USER 1234
#   k8s.gcr.io/pause:3.2                        our pause, under the suite's name
#
# Usage: build-images.sh OUT_DIR [--e2e BIN_DIR]
set -euo pipefail

# Keep in sync with testsupport/testbed.py and containerd.sh.
PAUSE_IMAGE="pykubelet.local/pause:3.9"
BUSYBOX_IMAGE="pykubelet.local/busybox:1.35"
IMAGE_PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
oci_writer="$here/oci_image.py"
pause_source="$here/images/pause.c"

die() { echo "build-images.sh: $*" >&2; exit 1; }

usage="usage: build-images.sh OUT_DIR [--e2e BIN_DIR]"
e2e_bin_dir=""
case $# in
    1) ;;
    3) [[ "$2" == --e2e ]] || die "$usage"; e2e_bin_dir="$(cd "$3" && pwd)" || die "no directory $3" ;;
    *) die "$usage" ;;
esac
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

# The static pause program in $work/pause (compiled once per run).
compile_pause() {
    local rootfs="$work/pause"
    [[ -x "$rootfs/pause" ]] && return 0
    mkdir -p "$rootfs"
    # -s strips symbols: the image should be as small as the upstream pause.
    gcc -static -Os -s -Wall -Werror -o "$rootfs/pause" "$pause_source" \
        || die "compiling $pause_source failed (is libc6-dev installed?)"
    chmod 0755 "$rootfs/pause"
}

# Usage: pack_pause NAME OUT
pack_pause() {
    compile_pause
    python3 "$oci_writer" --rootfs "$work/pause" --name "$1" --out "$2" \
        --entrypoint '["/pause"]' --env "PATH=$IMAGE_PATH"
}

build_pause() {
    pack_pause "$PAUSE_IMAGE" "$out_dir/pause.tar"
}

# Usage: busybox_rootfs DIR: busybox-static with every applet linked, /tmp,
# /root, and an /etc/passwd and /etc/group with root and nobody.
busybox_rootfs() {
    local rootfs="$1" applet
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
}

# Usage: pack_busybox ROOTFS NAME OUT: the busybox image under NAME.
pack_busybox() {
    python3 "$oci_writer" --rootfs "$1" --name "$2" --out "$3" --cmd '["sh"]' \
        --env "PATH=$IMAGE_PATH"
}

build_busybox() {
    busybox_rootfs "$work/busybox"
    pack_busybox "$work/busybox" "$BUSYBOX_IMAGE" "$out_dir/busybox.tar"
}

# The e2e images (see the header); each archive is named after its image.
E2E_AGNHOST="k8s.gcr.io/e2e-test-images/agnhost:2.21"
E2E_BUSYBOX="docker.io/library/busybox:1.29"
E2E_WEB_STANDINS=(docker.io/library/nginx:1.14-alpine docker.io/library/nginx:1.15-alpine
                  docker.io/library/httpd:2.4.38-alpine docker.io/library/httpd:2.4.39-alpine)
E2E_NONEWPRIVS="gcr.io/kubernetes-e2e-test-images/nonewprivs:1.0"
E2E_NONROOT="gcr.io/kubernetes-e2e-test-images/nonroot:1.0"
E2E_PAUSE="k8s.gcr.io/pause:3.2"

# Usage: write_curl_standin PATH. Upstream's agnhost image has curl (hooks and
# probes in the suite run `curl URL`); busybox has only wget, so this script
# takes curl's common options and fetches with wget: the body on stdout (or
# -o FILE), exit status non-zero when the request fails.
write_curl_standin() {
    cat >"$1" <<'CURL'
#!/bin/sh
# curl stand-in (pykubelet's e2e images): GET with busybox wget. The time limit
# goes to busybox timeout: busybox-static's own wget -T crashes.
out=- url= max_time= connect_timeout=
while [ $# -gt 0 ]; do
    case "$1" in
        -o|--output) out=$2; shift ;;
        -m|--max-time) max_time=$2; shift ;;
        --connect-timeout) connect_timeout=$2; shift ;;
        -H|--header|-X|--request|-d|--data|-u|--user|-w|--write-out|--retry) shift ;;
        -*) ;;
        *) url=$1 ;;
    esac
    shift
done
[ -n "$url" ] || { echo "curl: no URL specified" >&2; exit 2; }
limit=${max_time:-$connect_timeout}
if [ -n "$limit" ]; then
    exec timeout "${limit%.*}" wget -q -O "$out" "$url"
fi
exec wget -q -O "$out" "$url"
CURL
    chmod 0755 "$1"
}

# Usage: add_debian_program ROOTFS PACKAGE PATH DEST: the program at PATH in
# Debian's PACKAGE as DEST in ROOTFS, with the host's copies of the libraries
# it links. The package is only downloaded and unpacked, never installed on
# the host; the .deb is kept beside the archives for the next build.
add_debian_program() {
    local rootfs="$1" package="$2" path="$3" dest="$4" debs="$out_dir/debs" deb lib
    local unpacked="$work/deb-$package"
    mkdir -p "$debs"
    if ! compgen -G "$debs/${package}_*.deb" >/dev/null; then
        (cd "$debs" && apt-get -o APT::Sandbox::User=root download -qq "$package") \
            || die "apt-get download $package failed"
    fi
    deb="$(compgen -G "$debs/${package}_*.deb" | head -n 1)"
    rm -rf "$unpacked"
    dpkg-deb -x "$deb" "$unpacked"
    [[ -x "$unpacked/$path" ]] || die "$deb has no $path"
    if ldd "$unpacked/$path" | grep -q "not found"; then
        die "$package's $path needs a library this host lacks: $(ldd "$unpacked/$path" | grep 'not found')"
    fi
    rm -f "$rootfs$dest"
    install -m 0755 "$unpacked/$path" "$rootfs$dest"
    for lib in $(ldd "$unpacked/$path" | grep -o '/[^ ]*'); do
        mkdir -p "$rootfs$(dirname "$lib")"
        cp -L "$lib" "$rootfs$lib"
    done
}

e2e_archive() {
    local name="${1##*/}"
    echo "$out_dir/e2e/${name/:/_}.tar"
}

build_e2e() {
    local base="$work/e2e-busybox" rootfs name
    mkdir -p "$out_dir/e2e"
    busybox_rootfs "$base"

    pack_busybox "$base" "$E2E_BUSYBOX" "$(e2e_archive "$E2E_BUSYBOX")"

    rootfs="$work/agnhost"
    cp -a "$base" "$rootfs"
    install -m 0755 "$e2e_bin_dir/agnhost" "$rootfs/agnhost"
    ln -s agnhost "$rootfs/agnhost-2"
    mkdir -p "$rootfs/uploads"
    write_curl_standin "$rootfs/usr/bin/curl"
    # Debian's busybox runs its own applets before anything on PATH when its
    # shell is sh, so `sh -c "nc ..."` would never reach the real nc: the
    # image's sh is Debian's dash, as alpine's sh finds programs on PATH.
    add_debian_program "$rootfs" netcat-openbsd bin/nc.openbsd /usr/bin/nc
    rm -f "$rootfs/bin/nc"
    add_debian_program "$rootfs" dash bin/dash /bin/sh
    install -m 0644 "$e2e_bin_dir/image-data/test/images/agnhost/porter/localhost.crt" \
        "$e2e_bin_dir/image-data/test/images/agnhost/porter/localhost.key" "$rootfs/"
    python3 "$oci_writer" --rootfs "$rootfs" --name "$E2E_AGNHOST" \
        --out "$(e2e_archive "$E2E_AGNHOST")" --entrypoint '["/agnhost"]' --cmd '["pause"]' \
        --env "PATH=$IMAGE_PATH"

    rootfs="$work/web"
    cp -a "$base" "$rootfs"
    echo "pykubelet e2e web stand-in" >"$rootfs/var/www/index.html"
    for name in "${E2E_WEB_STANDINS[@]}"; do
        python3 "$oci_writer" --rootfs "$rootfs" --name "$name" --out "$(e2e_archive "$name")" \
            --cmd '["httpd", "-f", "-p", "80", "-h", "/var/www"]' --env "PATH=$IMAGE_PATH"
    done

    rootfs="$work/nonewprivs"
    cp -a "$base" "$rootfs"
    mkdir -p "$rootfs/usr/local/bin"
    install -m 4755 "$e2e_bin_dir/nonewprivs" "$rootfs/usr/local/bin/nnp"
    python3 "$oci_writer" --rootfs "$rootfs" --name "$E2E_NONEWPRIVS" \
        --out "$(e2e_archive "$E2E_NONEWPRIVS")" --cmd '["nnp"]' --env "PATH=$IMAGE_PATH"

    python3 "$oci_writer" --rootfs "$base" --name "$E2E_NONROOT" \
        --out "$(e2e_archive "$E2E_NONROOT")" --user 1234 --env "PATH=$IMAGE_PATH"

    pack_pause "$E2E_PAUSE" "$(e2e_archive "$E2E_PAUSE")"
    # Written last: its time stamp is what stale() compares with the inputs.
    printf '%s\n' "$E2E_AGNHOST" "$E2E_BUSYBOX" "${E2E_WEB_STANDINS[@]}" "$E2E_NONEWPRIVS" \
        "$E2E_NONROOT" "$E2E_PAUSE" >"$out_dir/e2e/complete"
}

if stale "$out_dir/pause.tar" "$pause_source" "$oci_writer" "${BASH_SOURCE[0]}"; then
    build_pause
    echo "built $out_dir/pause.tar ($PAUSE_IMAGE)"
fi
if stale "$out_dir/busybox.tar" "$busybox_bin" "$oci_writer" "${BASH_SOURCE[0]}"; then
    build_busybox
    echo "built $out_dir/busybox.tar ($BUSYBOX_IMAGE)"
fi
if [[ -n "$e2e_bin_dir" ]] && stale "$out_dir/e2e/complete" "$busybox_bin" "$oci_writer" \
        "${BASH_SOURCE[0]}" "$e2e_bin_dir/agnhost" "$e2e_bin_dir/nonewprivs" "$pause_source"; then
    rm -rf "$out_dir/e2e"
    build_e2e
    echo "built the e2e images in $out_dir/e2e"
fi
