#!/usr/bin/env bash
# Build a real Kubernetes control plane (and the Go kubelet, kube-proxy,
# kubeadm and the kubectl of the same version) from Debian's own `kubernetes`
# source package, for pykubelet's cluster-mode tests and demos, and in the same
# `make` (one compile cache) upstream's end-to-end suite (e2e.test, ginkgo),
# the test-image programs the conformance harness packs into images (agnhost,
# nonewprivs, the sample API server; scripts/conformance.sh) and upstream's
# sample device plugin (testsupport/device_plugin.py).
#
# Drive this control plane with the `kubectl` in the printed directory: a
# machine's own kubectl is usually far outside the version skew Kubernetes
# supports with a 1.20 API server.
#
# Nothing of Kubernetes is kept in this repository: the script adds a deb-src
# entry for the Debian archive the machine already uses, fetches the source
# package with `apt-get source` and runs upstream's own `make`. The binaries
# are cached per package version, so only the first run on a machine pays for
# the build (BUILD_ESTIMATE below: 6 to 25 minutes on a fresh 2-core machine,
# 2 GB of source, 1 GB of Go cache); the source tree and the Go cache are
# removed once the binaries are copied. A cache that lacks only some binaries
# (a target added to TARGETS since it was built) gets just those: the same
# source fetch and `make`, with only the missing targets named. While it
# builds, a line a minute on stderr says how long it has run and the build's
# latest step.
#
#   controlplane-build.sh          build if needed; print the binary dir on stdout
#   controlplane-build.sh --check  print the binary dir if the cache is complete,
#                                  exit 1 otherwise (never builds or installs)
#
# Also installs Debian's etcd-server (the store) and openssl (certificates).
# Environment:
#   PYKUBELET_K8S_CACHE   cache root (default /var/cache/pykubelet)
#   PYKUBELET_K8S_WORKDIR where the source is unpacked (default /var/tmp)
# Must run as root on Debian bookworm (apt). Quiet unless it builds or fails.
set -euo pipefail

SOURCE_PACKAGE=kubernetes
# Upstream's make targets; the cache holds each under its base name.
# (A target under vendor/ is a staging repository's main package; make accepts
# it as it does vendor/k8s.io/kube-aggregator, see hack/lib/golang.sh.)
TARGETS=(cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubelet
         cmd/kubectl cmd/kube-proxy cmd/kubeadm
         test/e2e/e2e.test vendor/github.com/onsi/ginkgo/ginkgo
         test/images/agnhost test/images/nonewprivs test/images/sample-device-plugin
         vendor/k8s.io/sample-apiserver)
BINARIES=("${TARGETS[@]##*/}")
# The image programs run in a busybox root file system with no C library
# (kubectl and kube-proxy are static in upstream's own list already).
STATIC_IMAGE_PROGRAMS="agnhost nonewprivs sample-apiserver"
# Source files the e2e images carry beside the programs, kept in the cache under
# image-data/: agnhost's porter TLS pair, and the page data and pictures of the
# Update Demo's nautilus and kitten (build-images.sh).
IMAGE_DATA=(test/images/agnhost/porter/localhost.crt test/images/agnhost/porter/localhost.key
            test/images/nautilus/html/data.json test/images/nautilus/html/nautilus.jpg
            test/images/kitten/html/data.json test/images/kitten/html/kitten.jpg)
BUILD_PACKAGES=(golang-go make rsync dpkg-dev golang-github-modern-go-reflect2-dev)
RUNTIME_PACKAGES=(etcd-server openssl)
# Debian's reflect2 1.0.2: the copy vendored by Kubernetes 1.20 (v1.0.1) reads
# Go runtime internals that changed in Go 1.18; with it the API server dies
# after about 30 s with "fatal error: fault" while iterating a map.
REFLECT2_DEBIAN=/usr/share/gocode/src/github.com/modern-go/reflect2
REFLECT2_VENDOR=vendor/github.com/modern-go/reflect2
DEB_SRC_LIST=/etc/apt/sources.list.d/pykubelet-deb-src.sources
# Measured end to end (the packages, the source download, upstream's make) on
# fresh 2-core, 24 GiB Debian bookworm machines: 564 s on one (381 s with the
# build packages already installed), 1473 s on
# another; the Go compiler's share depends on the cores' speed. With e2e.test,
# ginkgo, agnhost and nonewprivs in the same make: 422 s (packages installed).
BUILD_ESTIMATE="6 to 25 minutes on 2 cores"
# Adding only the sample device plugin to an otherwise complete cache: 110 s
# (2 cores, packages installed): 8 s to fetch and unpack the source, 50 s of
# upstream's code generators (make runs them whatever WHAT names), 52 s for
# the plugin. Adding kubectl, kube-proxy and the sample API server together:
# 226 s (2 cores, packages installed): 10 s of source, 65 s of code generators, 150 s for
# the three (a fresh build of every target has not been timed since; they
# share most packages with the API server, so it adds less than that).
# Adding kubeadm alone: 366 s on a loaded 2-core machine (a conformance run
# and an image build beside it): 20 s of source, 50 s of code generators,
# about 5 minutes for kubeadm.
ADD_ESTIMATE="2 to 6 minutes on 2 cores"
PROGRESS_SECONDS=60

cache_root="${PYKUBELET_K8S_CACHE:-/var/cache/pykubelet}"
work_root="${PYKUBELET_K8S_WORKDIR:-/var/tmp}"

log() { echo "controlplane-build.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

apt_quiet() {
    # apt-get with its output kept in a log that is shown only on failure;
    # waits for the dpkg lock, since other tools may be installing too.
    local apt_log status=0
    apt_log="$(mktemp /tmp/pykubelet-apt.XXXXXX.log)"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@" \
        >"$apt_log" 2>&1 || status=$?
    if [[ $status -ne 0 ]]; then
        tail -n 20 "$apt_log" >&2
        log "apt-get $* failed (exit $status; full log: $apt_log)"
        return "$status"
    fi
    rm -f "$apt_log"
}

apt_updated=0
apt_update() {
    [[ $apt_updated -eq 1 ]] && return 0
    apt_quiet update -qq || die "apt-get update failed"
    apt_updated=1
}

install_missing() {
    local package status missing=()
    for package in "$@"; do
        status="$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)"
        [[ "$status" == "install ok installed" ]] || missing+=("$package")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    log "installing ${missing[*]}"
    apt_update
    apt_quiet install -y -qq --no-install-recommends "${missing[@]}" \
        || die "could not install ${missing[*]}"
}

have_source_index() {
    [[ -n "$(apt-cache showsrc "$SOURCE_PACKAGE" 2>/dev/null | head -n 1)" ]]
}

write_deb_src_entry() {
    # Mirror the machine's own Debian "deb" entries for this release as
    # "deb-src": same archive, suites, components and keyring, nothing new.
    local codename
    codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
    [[ -n "$codename" ]] || die "cannot read VERSION_CODENAME from /etc/os-release"
    python3 - "$codename" "$DEB_SRC_LIST" <<'PY' || die "found no apt source for Debian to mirror as deb-src"
import glob
import sys

codename, target = sys.argv[1], sys.argv[2]
stanzas = []
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    if path == target:
        continue
    with open(path) as f:
        text = f.read()
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = None
        for line in block.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            if line[0].isspace() and key:
                fields[key] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        suites = [s for s in fields.get("suites", "").split() if s.split("-")[0] == codename]
        if "deb" not in fields.get("types", "").split() or not suites:
            continue
        stanza = ["Types: deb-src", "URIs: " + fields["uris"], "Suites: " + " ".join(suites),
                  "Components: " + fields.get("components", "main")]
        if "signed-by" in fields:
            stanza.append("Signed-By: " + fields["signed-by"])
        stanzas.append("\n".join(stanza))
for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        words = line.split("#", 1)[0].split()
        if len(words) < 4 or words[0] != "deb":
            continue
        options = []
        if words[1].startswith("["):
            while not words[1].endswith("]"):
                options.append(words.pop(1))
            options.append(words.pop(1))
        if len(words) < 4 or words[2].split("-")[0] != codename:
            continue
        opts = " ".join(options)
        stanzas.append(" ".join(["deb-src", *([opts] if opts else []), *words[1:]]))
if not stanzas:
    sys.exit(1)
if all(not s.startswith("deb-src ") for s in stanzas):
    body = "\n\n".join(stanzas) + "\n"
    suffix = ".sources"
else:
    body = "\n".join(s if s.startswith("deb-src ") else "" for s in stanzas).strip() + "\n"
    suffix = ".list"
# One-line entries go to a .list file, deb822 stanzas to a .sources file.
with open(target if suffix == ".sources" else target[: -len(".sources")] + ".list", "w") as f:
    f.write("# Written by pykubelet's scripts/testbed/controlplane-build.sh: the source\n"
            "# counterpart of the Debian entries above, for `apt-get source kubernetes`.\n")
    f.write(body)
PY
}

ensure_source_index() {
    have_source_index && return 0
    if [[ ! -e "$DEB_SRC_LIST" && ! -e "${DEB_SRC_LIST%.sources}.list" ]]; then
        write_deb_src_entry
        log "added deb-src entries for this machine's Debian archive"
    fi
    apt_updated=0
    apt_update
    have_source_index || die "apt knows no source package '$SOURCE_PACKAGE' even with deb-src entries"
}

package_version() {
    # The version apt-get source would pick: the highest one the indexes offer.
    apt-cache showsrc "$SOURCE_PACKAGE" | awk '/^Version:/ {print $2}' \
        | sort -u | while read -r v; do echo "$v"; done \
        | python3 -c '
import functools, subprocess, sys
versions = [line.strip() for line in sys.stdin if line.strip()]
def cmp(a, b):
    if a == b:
        return 0
    lower = subprocess.run(["dpkg", "--compare-versions", a, "lt", b]).returncode == 0
    return -1 if lower else 1
print(sorted(versions, key=functools.cmp_to_key(cmp))[-1])
'
}

cache_complete() {
    local binary data
    [[ -f "$1/complete" ]] || return 1
    for binary in "${BINARIES[@]}"; do
        [[ -x "$1/$binary" ]] || return 1
    done
    for data in "${IMAGE_DATA[@]}"; do
        [[ -f "$1/image-data/$data" ]] || return 1
    done
}

# The targets to build for the cache directory $1, one a line: those whose
# binary a finished build there lacks, or every target when there is none.
missing_targets() {
    local target
    for target in "${TARGETS[@]}"; do
        [[ -f "$1/complete" && -x "$1/${target##*/}" ]] || echo "$target"
    done
}

# Usage: report_progress STARTED_EPOCH BUILD_LOG ESTIMATE &
# A line every PROGRESS_SECONDS while the build runs: minutes so far and the
# latest step upstream's make announced ("+++ [time] Building go targets ...",
# followed by what it builds), so a first run is never silent for long.
report_progress() {
    local started=$1 build_log=$2 estimate=$3 step
    while sleep "$PROGRESS_SECONDS"; do
        step="$(awk '/^\+\+\+ / { step = $0; what = ""; next }
                     step != "" && /^ +[^ ]/ { sub(/^ +/, ""); what = what (what ? ", " : "") $0 }
                     END { sub(/^\+\+\+ \[[^]]*\] /, "", step); print step (what ? " " what : "") }' \
                "$build_log" 2>/dev/null)"
        log "still building: $(( ($(date +%s) - started) / 60 )) min so far ($estimate in all)" \
            "${step:+- $step}"
    done
}

# Usage: build VERSION BIN_DIR TARGET...
# A first build fills BIN_DIR.tmp and renames it to BIN_DIR once complete; a
# finished build in BIN_DIR gains the binaries (and image data) it lacks in
# place, each copied under a temporary name and renamed, so that a reader never
# sees half a file and `--check` stays false until the last one is there.
build() {
    local version="$1" bin_dir="$2" workdir srcdir build_log started progress_pid
    shift 2
    local targets=("$@") binaries=("${@##*/}") dest estimate
    if [[ -f "$bin_dir/complete" ]]; then
        dest="$bin_dir"
        estimate="$ADD_ESTIMATE"
    else
        dest="$bin_dir.tmp"
        estimate="$BUILD_ESTIMATE"
    fi
    build_log="$cache_root/$SOURCE_PACKAGE-$version.build.log"
    started=$SECONDS
    mkdir -p "$work_root"
    workdir="$(mktemp -d "$work_root/pykubelet-k8s-build.XXXXXX")"
    : >"$build_log"
    report_progress "$(date +%s)" "$build_log" "$estimate" &
    progress_pid=$!
    # The source tree and the Go caches are large: never leave them behind.
    trap 'kill "$progress_pid" 2>/dev/null; rm -rf "$workdir"' EXIT
    if [[ "$dest" == "$bin_dir" ]]; then
        log "adding ${binaries[*]:-image data} to $bin_dir, built from source: $estimate;" \
            "log: $build_log"
    else
        log "building $SOURCE_PACKAGE $version (${binaries[*]}) from source: $estimate" \
            "on a first run, cached afterwards; log: $build_log"
    fi
    (cd "$workdir" && apt-get -o APT::Sandbox::User=root source -qq "$SOURCE_PACKAGE=$version") \
        >>"$build_log" 2>&1 || { tail -n 20 "$build_log" >&2; die "apt-get source $SOURCE_PACKAGE=$version failed"; }
    srcdir="$(find "$workdir" -mindepth 1 -maxdepth 1 -type d -name "$SOURCE_PACKAGE-*" | head -n 1)"
    [[ -n "$srcdir" && -f "$srcdir/Makefile" ]] || die "no upstream tree (Makefile) unpacked in $workdir"
    [[ -d "$srcdir/$REFLECT2_VENDOR" ]] || die "$srcdir has no $REFLECT2_VENDOR to replace"
    [[ -f "$REFLECT2_DEBIAN/reflect2.go" ]] || die "$REFLECT2_DEBIAN missing (golang-github-modern-go-reflect2-dev)"
    rm -rf "${srcdir:?}/$REFLECT2_VENDOR"
    mkdir -p "$srcdir/$REFLECT2_VENDOR"
    find "$REFLECT2_DEBIAN" -maxdepth 1 -type f -name '*.go' ! -name '*_test.go' \
        -exec cp {} "$srcdir/$REFLECT2_VENDOR/" \;
    find "$REFLECT2_DEBIAN" -maxdepth 1 -type f \( -name '*.s' -o -name 'LICENSE' \) \
        -exec cp {} "$srcdir/$REFLECT2_VENDOR/" \; || true

    local binary
    # Upstream's make (hack/lib/golang.sh) builds in GOPATH mode from vendor/
    # and generates the OpenAPI definitions a plain `go build` lacks. Nothing
    # may come from the network; the version stamp comes from the package.
    local upstream_version="${version#*really}"
    upstream_version="v${upstream_version%%-*}"
    # An empty WHAT would make every upstream target: only image data missing
    # needs the source but no make.
    if [[ ${#targets[@]} -gt 0 ]]; then
        (
            cd "$srcdir"
            export GOPATH="$workdir/gopath" GOCACHE="$workdir/gocache" GOPROXY=off \
                GOTOOLCHAIN=local GOFLAGS=-mod=vendor GO111MODULE=off \
                KUBE_GIT_VERSION="$upstream_version" KUBE_GIT_TREE_STATE=clean \
                KUBE_BUILD_PLATFORMS=linux/"$(go env GOARCH)" \
                KUBE_STATIC_OVERRIDES="$STATIC_IMAGE_PROGRAMS"
            make WHAT="${targets[*]}"
        ) >>"$build_log" 2>&1 || { tail -n 30 "$build_log" >&2; die "make failed (log: $build_log)"; }
    fi

    local out
    out="$srcdir/_output/local/bin/linux/$(go env GOARCH)"
    mkdir -p "$dest"
    for binary in "${binaries[@]}"; do
        [[ -x "$out/$binary" ]] || die "make produced no $binary in $out"
        cp "$out/$binary" "$dest/.$binary.new"
        mv "$dest/.$binary.new" "$dest/$binary"
    done
    local data
    for data in "${IMAGE_DATA[@]}"; do
        [[ -f "$dest/image-data/$data" ]] && continue
        mkdir -p "$dest/image-data/$(dirname "$data")"
        cp "$srcdir/$data" "$dest/image-data/$data.new"
        mv "$dest/image-data/$data.new" "$dest/image-data/$data"
    done
    if [[ -x "$out/kube-apiserver" ]]; then
        "$dest/kube-apiserver" --version >"$dest/version" 2>&1 \
            || die "the built kube-apiserver does not run"
    fi
    if [[ "$dest" != "$bin_dir" ]]; then
        echo "$version" >"$dest/complete"
        rm -rf "$bin_dir"
        mv "$dest" "$bin_dir"
    fi
    rm -rf "$workdir"
    kill "$progress_pid" 2>/dev/null || true
    trap - EXIT
    log "built ${binaries[*]:-image data} ($(cat "$bin_dir/version")) in $((SECONDS - started)) s" \
        "into $bin_dir"
}

main() {
    local check_only=0
    case "${1:-}" in
        "") ;;
        --check) check_only=1 ;;
        *) die "usage: $0 [--check]" ;;
    esac
    if [[ $check_only -eq 1 ]]; then
        local dir
        for dir in "$cache_root/$SOURCE_PACKAGE"-*/; do
            cache_complete "${dir%/}" && { echo "${dir%/}"; return 0; }
        done
        return 1
    fi

    [[ $EUID -eq 0 ]] || die "must run as root (apt-get)"
    command -v apt-get >/dev/null || die "apt-get not found; this script supports Debian bookworm"
    install_missing "${RUNTIME_PACKAGES[@]}"
    ensure_source_index
    local version bin_dir
    version="$(package_version)"
    [[ -n "$version" ]] || die "cannot tell the version of source package $SOURCE_PACKAGE"
    bin_dir="$cache_root/$SOURCE_PACKAGE-$version"
    mkdir -p "$cache_root"
    if ! cache_complete "$bin_dir"; then
        # Several checkouts on one machine may ask at once: one builds, the
        # others wait for it and then find the cache.
        exec 9>"$cache_root/$SOURCE_PACKAGE-$version.lock"
        flock 9
        if ! cache_complete "$bin_dir"; then
            install_missing "${BUILD_PACKAGES[@]}"
            local targets
            mapfile -t targets < <(missing_targets "$bin_dir")
            build "$version" "$bin_dir" "${targets[@]}"
        fi
        flock -u 9
    fi
    echo "$bin_dir"
}

main "$@"
