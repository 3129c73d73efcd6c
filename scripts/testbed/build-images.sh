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
# its default registries), under exactly those names, into OUT_DIR/e2e/. Each
# stand-in is described where it is built (build_e2e); in short:
#   k8s.gcr.io/e2e-test-images/agnhost:2.21     the tree's agnhost program on busybox, with
#                                               Debian's dash, netcat-openbsd, curl, dig,
#                                               nslookup and getent
#   docker.io/library/busybox:1.29              the busybox image above, every applet also
#                                               linked in /bin as upstream's
#   docker.io/library/httpd:2.4.38-alpine, :2.4.39-alpine
#                                               STAND-INS: busybox httpd serving
#                                               /usr/local/apache2/htdocs on port 80
#   docker.io/library/nginx:1.14-alpine, :1.15-alpine
#                                               STAND-INS: busybox httpd serving
#                                               /usr/share/nginx/html on port 80
#   gcr.io/kubernetes-e2e-test-images/nautilus:1.0, kitten:1.0
#                                               agnhost test-webserver with the update demo's
#                                               data.json (and picture, when the cache has it)
#   gcr.io/kubernetes-e2e-test-images/jessie-dnsutils:1.0
#                                               STAND-IN: busybox, dash, Debian's dig,
#                                               nslookup and getent (not Debian jessie)
#   k8s.gcr.io/etcd:3.4.13-0                    STAND-IN: Debian's etcd 3.4 as /usr/local/bin/etcd
#   gcr.io/kubernetes-e2e-test-images/sample-apiserver:1.17
#                                               the tree's sample-apiserver, only when the
#                                               cache has BIN_DIR/sample-apiserver
#   gcr.io/kubernetes-e2e-test-images/nonewprivs:1.0  the tree's nnp program, setuid root
#   gcr.io/kubernetes-e2e-test-images/nonroot:1.0     busybox with USER 1234
#   k8s.gcr.io/pause:3.2                        our pause, under the suite's name
# Programs taken from the host (curl, dig, nslookup, getent, etcd) come with the
# host's copies of their libraries; the host needs curl, bind9-dnsutils and
# etcd-server.
#
# With --kubeadm BIN_DIR (the control-plane cache, which must hold kubeadm's
# version of the programs: controlplane-build.sh), also the images kubeadm
# v1.20.2's static-pod manifests and kube-proxy add-on name (`kubeadm config
# images list --kubernetes-version v1.20.2`), into OUT_DIR/kubeadm/, each on
# the busybox root file system of the e2e images, the program where kubeadm's
# manifests run it (build_kubeadm):
#   k8s.gcr.io/kube-apiserver:VERSION, kube-controller-manager:VERSION,
#   kube-scheduler:VERSION                      the cache's program as /usr/local/bin/NAME
#                                               (the manifests run it by name, on PATH)
#   k8s.gcr.io/kube-proxy:VERSION               /usr/local/bin/kube-proxy (the DaemonSet's
#                                               command), the host's iptables (legacy and
#                                               nft, chosen at the first call as upstream's
#                                               image does) and conntrack
#   k8s.gcr.io/etcd:3.4.13-0                    STAND-IN: Debian's etcd 3.4, as in --e2e
#                                               (the manifest runs `etcd` on PATH)
#   k8s.gcr.io/pause:3.2                        our pause, as in --e2e
# VERSION is the cache's (BIN_DIR/version: v1.20.2). NOT BUILT: CoreDNS
# (k8s.gcr.io/coredns:1.7.0), which neither Debian nor the 1.20 tree has:
# `kubeadm init` runs with --skip-phases=addon/coredns and the testbed's DNS
# stand-in (testsupport/cluster_dns.py, scripts/testbed/dns.sh) serves the
# kube-dns Service in its place.
#
# Usage: build-images.sh OUT_DIR [--e2e BIN_DIR] [--kubeadm BIN_DIR]
#        build-images.sh --list-kubeadm BIN_DIR   print the --kubeadm images' names
set -euo pipefail

# Keep in sync with testsupport/testbed.py and containerd.sh.
PAUSE_IMAGE="pykubelet.local/pause:3.9"
BUSYBOX_IMAGE="pykubelet.local/busybox:1.35"
IMAGE_PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
oci_writer="$here/oci_image.py"
pause_source="$here/images/pause.c"

die() { echo "build-images.sh: $*" >&2; exit 1; }

# The images of --kubeadm (see the header): kubeadm v1.20's registry, the
# control-plane programs tagged with the cache's version, and the etcd and
# pause tags kubeadm 1.20 names (its constants DefaultEtcdVersion and
# PauseVersion). tests/unit/test_kubeadm_image_list.py holds this list
# against the built kubeadm's own.
KUBEADM_REGISTRY="k8s.gcr.io"
KUBEADM_PROGRAMS=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy)
KUBEADM_ETCD="$KUBEADM_REGISTRY/etcd:3.4.13-0"
KUBEADM_PAUSE="$KUBEADM_REGISTRY/pause:3.2"

# Usage: kubeadm_version BIN_DIR: the cache's Kubernetes version (v1.20.2),
# from the version line controlplane-build.sh writes.
kubeadm_version() {
    local line
    line="$(cat "$1/version" 2>/dev/null || true)"
    [[ "$line" =~ ^Kubernetes\ (v[0-9][^ ]*)$ ]] || die "no Kubernetes version in $1/version"
    echo "${BASH_REMATCH[1]}"
}

# Usage: kubeadm_images BIN_DIR: the names of the --kubeadm images, one a line.
kubeadm_images() {
    local version program
    version="$(kubeadm_version "$1")"
    for program in "${KUBEADM_PROGRAMS[@]}"; do
        echo "$KUBEADM_REGISTRY/$program:$version"
    done
    echo "$KUBEADM_ETCD"
    echo "$KUBEADM_PAUSE"
}

usage="usage: build-images.sh OUT_DIR [--e2e BIN_DIR] [--kubeadm BIN_DIR]
       build-images.sh --list-kubeadm BIN_DIR"
if [[ "${1:-}" == --list-kubeadm ]]; then
    [[ $# -eq 2 ]] || die "$usage"
    kubeadm_images "$2"
    exit 0
fi
[[ $# -ge 1 && "$1" != -* ]] || die "$usage"
out_dir="$1"
shift
e2e_bin_dir=""
kubeadm_bin_dir=""
while [[ $# -gt 0 ]]; do
    [[ $# -ge 2 ]] || die "$usage"
    case "$1" in
        --e2e) e2e_bin_dir="$(cd "$2" && pwd)" || die "no directory $2" ;;
        --kubeadm) kubeadm_bin_dir="$(cd "$2" && pwd)" || die "no directory $2" ;;
        *) die "$usage" ;;
    esac
    shift 2
done
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
E2E_HTTPD_STANDINS=(docker.io/library/httpd:2.4.38-alpine docker.io/library/httpd:2.4.39-alpine)
E2E_NGINX_STANDINS=(docker.io/library/nginx:1.14-alpine docker.io/library/nginx:1.15-alpine)
E2E_NAUTILUS="gcr.io/kubernetes-e2e-test-images/nautilus:1.0"
E2E_KITTEN="gcr.io/kubernetes-e2e-test-images/kitten:1.0"
E2E_JESSIE_DNSUTILS="gcr.io/kubernetes-e2e-test-images/jessie-dnsutils:1.0"
E2E_ETCD="k8s.gcr.io/etcd:3.4.13-0"
E2E_SAMPLE_APISERVER="gcr.io/kubernetes-e2e-test-images/sample-apiserver:1.17"
E2E_NONEWPRIVS="gcr.io/kubernetes-e2e-test-images/nonewprivs:1.0"
E2E_NONROOT="gcr.io/kubernetes-e2e-test-images/nonroot:1.0"
E2E_PAUSE="k8s.gcr.io/pause:3.2"
# Where the web-server stand-ins serve from: upstream's document roots, which
# the suite's commands move files in and out of.
HTTPD_DOCROOT=/usr/local/apache2/htdocs
NGINX_DOCROOT=/usr/share/nginx/html
# The update demo's pages in the control-plane cache (controlplane-build.sh's
# IMAGE_DATA), when it has them.
UPDATE_DEMO_DATA=test/images

# Usage: add_program ROOTFS SRC DEST [HINT]: the program SRC as DEST in ROOTFS,
# with the host's copies of the libraries it links (none when it is static).
# HINT says what to install when SRC or one of its libraries is missing.
add_program() {
    local rootfs="$1" src="$2" dest="$3" hint="${4:-}"
    [[ -x "$src" ]] || die "no program $src${hint:+ ($hint)}"
    rm -f "$rootfs$dest"
    mkdir -p "$rootfs$(dirname "$dest")"
    install -m 0755 "$src" "$rootfs$dest"
    add_libraries "$rootfs" "$src" "$hint"
}

# Usage: add_libraries ROOTFS SRC [HINT]: the host's copies of the libraries
# the program or shared object SRC links, at their paths in ROOTFS.
add_libraries() {
    local rootfs="$1" src="$2" hint="${3:-}" libs lib
    # ldd fails on a static program: nothing more to copy.
    libs="$(ldd "$src" 2>/dev/null)" || return 0
    if [[ "$libs" == *"not found"* ]]; then
        die "$src needs a library this host lacks${hint:+ ($hint)}: $libs"
    fi
    for lib in $(grep -o '/[^ ]*' <<<"$libs" || true); do
        mkdir -p "$rootfs$(dirname "$lib")"
        cp -L "$lib" "$rootfs$lib"
    done
}

# Usage: add_debian_program ROOTFS PACKAGE PATH DEST: the program at PATH in
# Debian's PACKAGE as DEST in ROOTFS (see add_program). The package is only
# downloaded and unpacked, never installed on the host; the .deb is kept
# beside the archives for the next build.
add_debian_program() {
    local rootfs="$1" package="$2" path="$3" dest="$4" debs="$out_dir/debs" deb
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
    add_program "$rootfs" "$unpacked/$path" "$dest"
}

# The host programs the e2e images carry (see the header).
HOST_CURL=/usr/bin/curl
HOST_DIG=/usr/bin/dig
HOST_NSLOOKUP=/usr/bin/nslookup
HOST_GETENT=/usr/bin/getent
HOST_ETCD=/usr/bin/etcd

# Usage: add_dns_tools ROOTFS: the DNS clients upstream's agnhost (alpine's
# bind-tools) and jessie-dnsutils (Debian's dnsutils) have and the DNS tests
# run: dig (`dig +notcp +noall +answer +search NAME`, `dig +short ...`),
# nslookup, and getent for /etc/hosts lookups. BIND's dig has no small
# substitute (busybox has none, and kdig or drill take other options), so it
# comes from the host with its libraries (about 55 MB, ICU's data the most).
# The host's copies, not a downloaded .deb: a newer bind9-dnsutils than the
# host's bind9-libs would not run against them.
add_dns_tools() {
    local rootfs="$1" hint="apt-get install bind9-dnsutils"
    add_program "$rootfs" "$HOST_DIG" /usr/bin/dig "$hint"
    add_program "$rootfs" "$HOST_NSLOOKUP" /usr/bin/nslookup "$hint"
    add_program "$rootfs" "$HOST_GETENT" /usr/bin/getent "libc-bin"
}

# Usage: add_curl ROOTFS: curl, which upstream's agnhost (alpine's curl, on
# OpenSSL) has and the suite runs in it: hooks and probes (`curl URL`), the
# kubelet-port tests (`curl -sIk -o /dev/null -w '%{http_code}' https://...`).
# The host's curl with its libraries (about 19 MB), Debian's on OpenSSL 3: a
# script over busybox wget is no substitute, as busybox's TLS client offers
# no signature_algorithms and so fails the handshake with servers that refuse
# SHA-1 signatures (OpenSSL 3 at level 2, Go >= 1.25). No CA bundle: the
# suite's HTTPS requests pass -k; one without -k fails with curl's status 77.
add_curl() {
    add_program "$1" "$HOST_CURL" /usr/bin/curl "apt-get install curl"
}

# Usage: link_applets_in_bin ROOTFS: every busybox applet also as /bin/NAME
# (where ROOTFS has nothing of that name), as upstream's busybox image lays
# them out: the suite runs some by that path (the sysctl test's /bin/sysctl,
# which busybox --list-full puts in /sbin).
link_applets_in_bin() {
    local rootfs="$1" applet
    while read -r applet; do
        [[ -n "$applet" && "$applet" != busybox ]] || continue
        [[ -e "$rootfs/bin/$applet" || -L "$rootfs/bin/$applet" ]] \
            || ln -s /bin/busybox "$rootfs/bin/$applet"
    done < <("$busybox_bin" --list)
    [[ -L "$rootfs/bin/sysctl" ]] || die "busybox does not provide sysctl"
}

e2e_archive() {
    local name="${1##*/}"
    echo "$out_dir/e2e/${name/:/_}.tar"
}

# Usage: pack_e2e ROOTFS NAME [oci_image.py options]: the archive of NAME, and
# NAME noted in the list build_e2e writes into e2e/complete.
E2E_BUILT=()
pack_e2e() {
    local rootfs="$1" name="$2"
    shift 2
    python3 "$oci_writer" --rootfs "$rootfs" --name "$name" --out "$(e2e_archive "$name")" \
        --env "PATH=$IMAGE_PATH" "$@"
    E2E_BUILT+=("$name")
}

# Usage: write_update_demo ROOTFS PICTURE: the update demo's data.json, naming
# PICTURE, and the picture itself, at the root test-webserver serves. The
# tree's files when the cache has them; otherwise a data.json of our own
# (the suite reads only data.json, through the API server's pod proxy, and
# checks that its "image" names PICTURE) and no picture.
write_update_demo() {
    local rootfs="$1" picture="$2" html
    html="$e2e_bin_dir/image-data/$UPDATE_DEMO_DATA/${picture%.jpg}/html"
    if [[ -f "$html/data.json" && -f "$html/$picture" ]]; then
        install -m 0644 "$html/data.json" "$html/$picture" "$rootfs/"
    else
        printf '{"image": "%s"}\n' "$picture" >"$rootfs/data.json"
        chmod 0644 "$rootfs/data.json"
    fi
}

# The optional inputs the e2e images were built from, one a line: build_e2e
# notes them in e2e/complete, so that one appearing later (the sample API
# server built by a later make) triggers a rebuild.
e2e_optional_inputs() {
    [[ -x "$e2e_bin_dir/sample-apiserver" ]] && echo "input: sample-apiserver"
    local picture
    for picture in nautilus.jpg kitten.jpg; do
        [[ -f "$e2e_bin_dir/image-data/$UPDATE_DEMO_DATA/${picture%.jpg}/html/$picture" ]] \
            && echo "input: $picture"
    done
    return 0
}
# Usage: web_standin NAME DOCROOT HEADING IMAGE...: busybox httpd on port 80 serving
# DOCROOT, with an index.html whose heading is HEADING, packed as each IMAGE.
web_standin() {
    local name="$1" docroot="$2" heading="$3" rootfs="$work/$1" image
    shift 3
    cp -a "$base" "$rootfs"
    mkdir -p "$rootfs$docroot"
    echo "<html><body><h1>$heading</h1></body></html>" >"$rootfs$docroot/index.html"
    for image in "$@"; do
        pack_e2e "$rootfs" "$image" --cmd "[\"httpd\", \"-f\", \"-p\", \"80\", \"-h\", \"$docroot\"]"
    done
}


# The root file system the e2e and kubeadm images start from, in $work (made
# once per run): busybox with its applets also in /bin, and an nsswitch.conf.
program_base() {
    local base="$work/e2e-busybox"
    [[ -d "$base" ]] && return 0
    busybox_rootfs "$base"
    link_applets_in_bin "$base"
    # Without this file glibc (getent) and Go programs (etcd resolving its
    # default peer URL http://localhost:2380) ask DNS before /etc/hosts, so
    # the kubelet's /etc/hosts entries would be missed or come too late.
    printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$base/etc/nsswitch.conf"
    chmod 0644 "$base/etc/nsswitch.conf"
}

# The etcd stand-in's root file system, $work/etcd (made once per run):
# Debian's etcd 3.4 (the control plane's own) as /usr/local/bin/etcd on the
# program base, which has /usr/local/bin on PATH.
etcd_rootfs() {
    local rootfs="$work/etcd"
    [[ -d "$rootfs" ]] && return 0
    program_base
    cp -a "$work/e2e-busybox" "$rootfs"
    add_program "$rootfs" "$HOST_ETCD" /usr/local/bin/etcd "apt-get install etcd-server"
}

build_e2e() {
    local base="$work/e2e-busybox" rootfs name
    mkdir -p "$out_dir/e2e"
    program_base

    pack_e2e "$base" "$E2E_BUSYBOX" --cmd '["sh"]'

    # agnhost: upstream's is alpine with agnhost, curl, netcat-openbsd,
    # bind-tools, iproute2, iperf and bash. Ours has the tree's agnhost, the
    # porter's TLS pair and /uploads as upstream lays them out; busybox for the
    # rest, Debian's curl (add_curl), nc (busybox's has no UDP) and dash as sh:
    # Debian's busybox runs its own applets before anything on PATH when its
    # shell is sh, so `sh -c "nc ..."` would never reach the real nc, whereas
    # alpine's sh finds programs on PATH. No iperf, bash or coredns: no
    # [Conformance] test runs them.
    rootfs="$work/agnhost"
    cp -a "$base" "$rootfs"
    install -m 0755 "$e2e_bin_dir/agnhost" "$rootfs/agnhost"
    ln -s agnhost "$rootfs/agnhost-2"
    mkdir -p "$rootfs/uploads"
    add_debian_program "$rootfs" netcat-openbsd bin/nc.openbsd /usr/bin/nc
    rm -f "$rootfs/bin/nc"   # busybox's, from link_applets_in_bin
    add_debian_program "$rootfs" dash bin/dash /bin/sh
    install -m 0644 "$e2e_bin_dir/image-data/test/images/agnhost/porter/localhost.crt" \
        "$e2e_bin_dir/image-data/test/images/agnhost/porter/localhost.key" "$rootfs/"

    # nautilus and kitten (kubectl's Update Demo): upstream's are the agnhost
    # image with the demo's data.json and picture, running test-webserver,
    # which serves the root directory on port 80. Ours are the same on our
    # agnhost, without its curl and DNS tools (added below) to keep them
    # small: the suite only fetches data.json from them.
    rootfs="$work/nautilus"
    cp -a "$work/agnhost" "$rootfs"
    write_update_demo "$rootfs" nautilus.jpg
    pack_e2e "$rootfs" "$E2E_NAUTILUS" --entrypoint '["/agnhost"]' --cmd '["test-webserver"]'
    rootfs="$work/kitten"
    cp -a "$work/agnhost" "$rootfs"
    write_update_demo "$rootfs" kitten.jpg
    pack_e2e "$rootfs" "$E2E_KITTEN" --entrypoint '["/agnhost"]' --cmd '["test-webserver"]'

    rootfs="$work/agnhost"
    add_curl "$rootfs"
    add_dns_tools "$rootfs"
    pack_e2e "$rootfs" "$E2E_AGNHOST" --entrypoint '["/agnhost"]' --cmd '["pause"]'

    # jessie-dnsutils (the DNS tests' second querier): upstream's is Debian
    # jessie with dnsutils (and coredns, which only the non-conformance DNS
    # config-map tests run). A STAND-IN: busybox with dash as sh and the DNS
    # tools above; the tests run shell loops of dig, getent, hostname, awk,
    # tr, seq and sleep in it, writing their answers into a volume.
    rootfs="$work/jessie-dnsutils"
    cp -a "$base" "$rootfs"
    add_debian_program "$rootfs" dash bin/dash /bin/sh
    add_dns_tools "$rootfs"
    pack_e2e "$rootfs" "$E2E_JESSIE_DNSUTILS" --cmd '["sh"]'

    # httpd and nginx: upstream's are Apache and nginx on alpine. STAND-INS:
    # busybox httpd on port 80 serving upstream's document root, an
    # index.html in it. The suite only needs a long-running web server whose
    # files it can move: the StatefulSet tests probe /index.html over HTTP
    # and break and restore that probe with `mv -v $HTTPD_DOCROOT/index.html
    # /tmp/` and back; kubectl's port-forward test looks for Apache's "It
    # works!" page.
    web_standin httpd "$HTTPD_DOCROOT" 'It works!' "${E2E_HTTPD_STANDINS[@]}"
    web_standin nginx "$NGINX_DOCROOT" 'Welcome to nginx!' "${E2E_NGINX_STANDINS[@]}"

    # etcd (beside the sample API server in the aggregator test's pod, which
    # runs /usr/local/bin/etcd on 127.0.0.1:2379): upstream's is etcd 3.4.13.
    # A STAND-IN: Debian's etcd 3.4 (the control plane's own) on busybox; its
    # data directory goes into the container's working directory, as upstream's.
    etcd_rootfs
    pack_e2e "$work/etcd" "$E2E_ETCD" --cmd '["/usr/local/bin/etcd"]'

    # sample-apiserver: upstream's is the tree's program on alpine; ours is
    # the same program on busybox. The control-plane cache has it only once
    # controlplane-build.sh builds it; until then the image is left out and
    # the aggregator test cannot run.
    if [[ -x "$e2e_bin_dir/sample-apiserver" ]]; then
        rootfs="$work/sample-apiserver"
        cp -a "$base" "$rootfs"
        add_program "$rootfs" "$e2e_bin_dir/sample-apiserver" /sample-apiserver
        pack_e2e "$rootfs" "$E2E_SAMPLE_APISERVER" --entrypoint '["/sample-apiserver"]'
    else
        echo "build-images.sh: no $e2e_bin_dir/sample-apiserver:" \
            "skipping $E2E_SAMPLE_APISERVER (the aggregator test needs it)" >&2
    fi

    rootfs="$work/nonewprivs"
    cp -a "$base" "$rootfs"
    mkdir -p "$rootfs/usr/local/bin"
    install -m 4755 "$e2e_bin_dir/nonewprivs" "$rootfs/usr/local/bin/nnp"
    pack_e2e "$rootfs" "$E2E_NONEWPRIVS" --cmd '["nnp"]'

    pack_e2e "$base" "$E2E_NONROOT" --user 1234

    pack_pause "$E2E_PAUSE" "$(e2e_archive "$E2E_PAUSE")"
    E2E_BUILT+=("$E2E_PAUSE")
    # Written last: its time stamp is what stale() compares with the inputs,
    # and its optional inputs what e2e_current() compares with the cache's.
    { printf '%s\n' "${E2E_BUILT[@]}"; e2e_optional_inputs; } >"$out_dir/e2e/complete"
}

# The host's iptables and conntrack, which the kube-proxy image carries.
HOST_XTABLES_NFT=/usr/sbin/xtables-nft-multi
HOST_XTABLES_LEGACY=/usr/sbin/xtables-legacy-multi
HOST_CONNTRACK=/usr/sbin/conntrack
# The names kube-proxy runs iptables by (utiliptables: the save and restore
# programs of both families).
IPTABLES_NAMES=(iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore)

# Usage: add_iptables ROOTFS: the host's iptables 1.8, both backends, behind a
# wrapper that picks one at the first call. kube-proxy runs in the node's
# network namespace (hostNetwork) beside the kubelet, whose chains
# (KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY) it must see and extend, so it has
# to use the backend the node's kubelet uses, which the image cannot know when
# it is built. Upstream's kube-proxy 1.20 image (debian-iptables) decides at
# run time by looking at the node's rules; this wrapper does the same:
#   1. the kubelet's chains in the legacy tables: legacy;
#   2. else the kubelet's chains in the nf_tables ones: nft;
#   3. else the backend holding more rules (legacy only when it has more).
# It then points the six names at that backend's program and runs it, so
# later calls go straight there. The extension modules (XTABLES_LIBDIR) and
# every library come from the host, so versions match.
add_iptables() {
    local rootfs="$1" hint="apt-get install iptables" libdir module name
    add_program "$rootfs" "$HOST_XTABLES_NFT" /usr/sbin/xtables-nft-multi "$hint"
    add_program "$rootfs" "$HOST_XTABLES_LEGACY" /usr/sbin/xtables-legacy-multi "$hint"
    libdir="$(compgen -G '/usr/lib/*/xtables' | head -n 1 || true)"
    [[ -n "$libdir" && -f "$libdir/libxt_comment.so" ]] \
        || die "no iptables extensions (/usr/lib/*/xtables) on the host ($hint)"
    mkdir -p "$rootfs$libdir"
    for module in "$libdir"/*.so; do
        install -m 0644 "$module" "$rootfs$module"
        add_libraries "$rootfs" "$module" "$hint"
    done
    cat >"$rootfs/usr/sbin/iptables-wrapper" <<'EOF'
#!/bin/sh
# pykubelet's kube-proxy image: choose the iptables backend the node uses
# (build-images.sh, add_iptables), then run the command with it.
set -eu
kubelet_chains() {
    { "$1" iptables-save; "$1" ip6tables-save; } 2>/dev/null \
        | grep -q -e '^:KUBE-IPTABLES-HINT ' -e '^:KUBE-KUBELET-CANARY '
}
rules() {
    { "$1" iptables-save; "$1" ip6tables-save; } 2>/dev/null | grep -c '^-' || true
}
if kubelet_chains xtables-legacy-multi; then
    mode=legacy
elif kubelet_chains xtables-nft-multi; then
    mode=nft
elif [ "$(rules xtables-legacy-multi)" -gt "$(rules xtables-nft-multi)" ]; then
    mode=legacy
else
    mode=nft
fi
for name in IPTABLES_NAMES; do
    ln -sf "xtables-$mode-multi" "/usr/sbin/.$name.$$"
    mv -f "/usr/sbin/.$name.$$" "/usr/sbin/$name"
done
exec "/usr/sbin/${0##*/}" "$@"
EOF
    sed -i "s/IPTABLES_NAMES/${IPTABLES_NAMES[*]}/" "$rootfs/usr/sbin/iptables-wrapper"
    chmod 0755 "$rootfs/usr/sbin/iptables-wrapper"
    for name in "${IPTABLES_NAMES[@]}"; do
        ln -sf iptables-wrapper "$rootfs/usr/sbin/$name"
    done
}

# Usage: pack_kubeadm ROOTFS NAME [oci_image.py options]: the archive of NAME
# in kubeadm/, and NAME noted in the list build_kubeadm writes into
# kubeadm/complete.
KUBEADM_BUILT=()
pack_kubeadm() {
    local rootfs="$1" name="$2" archive
    shift 2
    archive="$out_dir/kubeadm/${name##*/}.tar"
    python3 "$oci_writer" --rootfs "$rootfs" --name "$name" --out "${archive/:/_}" \
        --env "PATH=$IMAGE_PATH" "$@"
    KUBEADM_BUILT+=("$name")
}

build_kubeadm() {
    local base="$work/e2e-busybox" version rootfs program
    version="$(kubeadm_version "$kubeadm_bin_dir")"
    mkdir -p "$out_dir/kubeadm"
    program_base
    # The control plane: kubeadm's static pods run `kube-apiserver ...` (and
    # the others) by name; upstream's images have them in /usr/local/bin.
    # kube-proxy: the add-on's DaemonSet runs /usr/local/bin/kube-proxy,
    # privileged in the node's network namespace, with the node's
    # /run/xtables.lock; it runs iptables, ip6tables, their save and restore
    # programs, and conntrack to clear UDP entries.
    for program in "${KUBEADM_PROGRAMS[@]}"; do
        rootfs="$work/kubeadm-$program"
        cp -a "$base" "$rootfs"
        add_program "$rootfs" "$kubeadm_bin_dir/$program" "/usr/local/bin/$program"
        if [[ "$program" == kube-proxy ]]; then
            add_iptables "$rootfs"
            add_program "$rootfs" "$HOST_CONNTRACK" /usr/sbin/conntrack "apt-get install conntrack"
        fi
        pack_kubeadm "$rootfs" "$KUBEADM_REGISTRY/$program:$version" \
            --cmd "[\"/usr/local/bin/$program\"]"
    done
    # etcd: kubeadm's static pod runs `etcd --data-dir=/var/lib/etcd ...` by
    # name, its data directory a hostPath volume.
    etcd_rootfs
    pack_kubeadm "$work/etcd" "$KUBEADM_ETCD" --cmd '["/usr/local/bin/etcd"]'
    # pause: the kubelet flag kubeadm writes (--pod-infra-container-image) names it.
    compile_pause
    pack_kubeadm "$work/pause" "$KUBEADM_PAUSE" --entrypoint '["/pause"]'
    # Written last, as e2e/complete.
    printf '%s\n' "${KUBEADM_BUILT[@]}" >"$out_dir/kubeadm/complete"
}

# True when e2e/complete notes the optional inputs the cache has now.
e2e_current() {
    local noted
    noted="$(grep '^input: ' "$out_dir/e2e/complete" 2>/dev/null || true)"
    [[ "$noted" == "$(e2e_optional_inputs)" ]]
}

if stale "$out_dir/pause.tar" "$pause_source" "$oci_writer" "${BASH_SOURCE[0]}"; then
    build_pause
    echo "built $out_dir/pause.tar ($PAUSE_IMAGE)"
fi
if stale "$out_dir/busybox.tar" "$busybox_bin" "$oci_writer" "${BASH_SOURCE[0]}"; then
    build_busybox
    echo "built $out_dir/busybox.tar ($BUSYBOX_IMAGE)"
fi
if [[ -n "$e2e_bin_dir" ]]; then
    e2e_inputs=("$busybox_bin" "$oci_writer" "${BASH_SOURCE[0]}" "$e2e_bin_dir/agnhost"
                "$e2e_bin_dir/nonewprivs" "$pause_source" "$HOST_CURL" "$HOST_DIG" "$HOST_NSLOOKUP"
                "$HOST_GETENT" "$HOST_ETCD")
    if [[ -e "$e2e_bin_dir/sample-apiserver" ]]; then
        e2e_inputs+=("$e2e_bin_dir/sample-apiserver")
    fi
    if stale "$out_dir/e2e/complete" "${e2e_inputs[@]}" || ! e2e_current; then
        rm -rf "$out_dir/e2e"
        build_e2e
        echo "built the e2e images in $out_dir/e2e"
    fi
fi
if [[ -n "$kubeadm_bin_dir" ]]; then
    kubeadm_inputs=("$busybox_bin" "$oci_writer" "${BASH_SOURCE[0]}" "$pause_source" "$HOST_ETCD"
                    "$HOST_XTABLES_NFT" "$HOST_XTABLES_LEGACY" "$HOST_CONNTRACK"
                    "$kubeadm_bin_dir/version")
    for program in "${KUBEADM_PROGRAMS[@]}"; do
        kubeadm_inputs+=("$kubeadm_bin_dir/$program")
    done
    # Also rebuilt when the names differ (another cache's version).
    if stale "$out_dir/kubeadm/complete" "${kubeadm_inputs[@]}" \
            || [[ "$(cat "$out_dir/kubeadm/complete")" != "$(kubeadm_images "$kubeadm_bin_dir")" ]]; then
        rm -rf "$out_dir/kubeadm"
        build_kubeadm
        echo "built the kubeadm images in $out_dir/kubeadm"
    fi
fi
