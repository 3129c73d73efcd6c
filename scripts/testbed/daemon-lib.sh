# Shell functions shared by the testbed's daemon scripts (containerd.sh, registry.sh,
# dns.sh, controlplane.sh).
# Sourced, not run.

# The absolute form of a directory path, with // and trailing slashes collapsed, so
# that the paths grepped for in daemons' command lines match what was started.
absolute_dir() {
    local path="$1"
    [[ "$path" == /* ]] || path="$PWD/$path"
    path="$(echo "$path" | sed -e 's#//*#/#g' -e 's#/$##')"
    echo "${path:-/}"
}

# pid_in_file FILE: the pid FILE holds, whether or not anything runs under it.
pid_in_file() {
    local pid
    [[ -s "$1" ]] || return 1
    pid="$(cat "$1")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    echo "$pid"
}

# process_running PID: whether PID is a live process (not gone, not a zombie waiting
# to be reaped). A daemon started from a shell that has since exited is reaped by
# whoever adopted it, possibly much later, so a zombie counts as stopped.
process_running() {
    local state
    state="$(awk '{ sub(/.*\) /, ""); print $1 }' 2>/dev/null <"/proc/$1/stat")" || return 1
    [[ -n "$state" && "$state" != Z ]]
}

# pid_from_file FILE MATCH: the pid FILE holds, if that process runs with MATCH in its
# command line. A stale pid file may name a recycled pid: the check makes sure the
# process is the daemon this directory started.
pid_from_file() {
    local file="$1" match="$2" pid
    pid="$(pid_in_file "$file")" || return 1
    # Read whole, then matched: piped into grep -q, a grep that stops at the first match
    # can fail the pipeline under pipefail, and a live daemon would be taken for dead.
    local args
    args="$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" || return 1
    [[ "$args" == *"$match"* ]] || return 1
    echo "$pid"
}

# refuse_system_dir DIR: die (the sourcing script's die) when DIR is one of the machine's
# own directories: a script that deletes its DIR on stop must never be given one.
refuse_system_dir() {
    case "$1" in
        / | /tmp | /usr* | /etc* | /var | /root | /home) die "refusing to use $1 as DIR" ;;
    esac
}

# usage_from_header SCRIPT: SCRIPT's header comment (its usage) on stderr, then exit 2.
usage_from_header() {
    sed -n '2,/^set -euo/p' "$1" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 2
}
