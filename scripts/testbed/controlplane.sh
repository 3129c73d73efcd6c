#!/usr/bin/env bash
# A throw-away Kubernetes control plane for pykubelet's cluster-mode tests and
# demos: Debian's etcd 3.4 and the kube-apiserver, kube-controller-manager and
# kube-scheduler that controlplane-build.sh builds from Debian's source package.
#
# Everything lives under DIR; every component listens on 127.0.0.1 (the API
# server on PYKUBELET_CONTROLPLANE_ADVERTISE_ADDRESS when set) on ports
# the kernel hands out at start, so several control planes can run at once.
# All traffic is TLS with certificates from a CA generated under DIR/pki:
#   DIR/env                  shell-sourceable facts: ports, URLs, file paths
#   DIR/admin.kubeconfig     cluster admin (O=system:masters)
#   DIR/pki/                 ca.crt/ca.key (also the CSR signer), sa.key/sa.pub,
#                            front-proxy-ca.*, serving and client certificates
#   DIR/logs/COMPONENT.log   DIR/run/COMPONENT.pid   DIR/etcd (data)
#   DIR/nodes/NAME.kubeconfig  node credentials (node-credentials)
#   DIR/bootstrap.kubeconfig   bootstrap token credentials (bootstrap-kubeconfig)
#   DIR/kube-proxy.kubeconfig  kube-proxy's credentials (proxy-credentials)
#
# Usage:
#   controlplane.sh start DIR                  start everything, wait until ready
#   controlplane.sh stop DIR                   stop everything and delete DIR
#   controlplane.sh status DIR                 exit 0 when every component is up
#   controlplane.sh node-credentials DIR NAME  print the path of a kubeconfig
#                                              for CN=system:node:NAME, O=system:nodes
#   controlplane.sh bootstrap-kubeconfig DIR   print the path of a kubeconfig with a
#                                              bootstrap token allowed to get a kubelet
#                                              client certificate through a CSR
#   controlplane.sh proxy-credentials DIR      print the path of a kubeconfig for
#                                              CN=system:kube-proxy (bound to the
#                                              ClusterRole system:node-proxier by the
#                                              default RBAC policy), for kube-proxy
# Environment: PYKUBELET_K8S_BIN_DIR (default: the cache controlplane-build.sh fills),
#   PYKUBELET_CONTROLPLANE_READY_TIMEOUT (seconds, default 120),
#   PYKUBELET_CONTROLPLANE_SIGNING_DURATION (kube-controller-manager's
#   --cluster-signing-duration, e.g. 7m, for certificate rotation tests),
#   PYKUBELET_CONTROLPLANE_ADVERTISE_ADDRESS (an address of this host that pods
#   and test hosts reach, e.g. nodehost.sh's HOST_ADDRESS: kube-apiserver binds
#   and advertises it instead of 127.0.0.1, the kubeconfigs name it, the
#   serving certificate carries it, and the `kubernetes` Service gets it as its
#   endpoint; etcd, the controller manager's and the scheduler's own ports stay
#   on 127.0.0.1. It also gets --enable-aggregator-routing=true: aggregated API
#   servers, admission webhooks and CRD conversion webhooks are then called at
#   their Service's endpoint (pod) IP, which this host routes to the test hosts,
#   instead of the ClusterIP, which only kube-proxy on this host would translate),
#   PYKUBELET_CONTROLPLANE_AUDIT (1: kube-apiserver writes an audit log of every
#   request made by a user of group system:nodes, the kubelets, at level Metadata,
#   one JSON line each once its response completed, to DIR/logs/audit.log with the
#   policy in DIR/audit-policy.yaml; bench/audit.py counts it. Default off.)
set -euo pipefail

COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler)
READY_TIMEOUT=${PYKUBELET_CONTROLPLANE_READY_TIMEOUT:-120}
SIGNING_DURATION=${PYKUBELET_CONTROLPLANE_SIGNING_DURATION:-}
ADVERTISE_ADDRESS=${PYKUBELET_CONTROLPLANE_ADVERTISE_ADDRESS:-}
AUDIT=${PYKUBELET_CONTROLPLANE_AUDIT:-}
STOP_TIMEOUT=15
SERVICE_CLUSTER_IP_RANGE=10.96.0.0/16
SERVICE_CLUSTER_IP=10.96.0.1  # the first address: the kubernetes Service
SERVICE_ACCOUNT_ISSUER=https://kubernetes.default.svc.cluster.local
CERT_DAYS=3650
MARKER=.pykubelet-controlplane
# The group kubeadm puts its node bootstrap tokens in, and the bindings it
# creates for it: the same names, so that what works here works on kubeadm.
BOOTSTRAP_GROUP=system:bootstrappers:kubeadm:default-node-token

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=daemon-lib.sh
source "$here/daemon-lib.sh"

log() { echo "controlplane.sh: $*" >&2; }

show_log() {
    local component="$1" file
    file="$dir/logs/$component.log"
    [[ -s "$file" ]] || return 0
    log "last lines of $file:"
    tail -n 25 "$file" >&2
}

die() {
    log "error: $*"
    exit 1
}

usage() {
    die "usage: $0 start|stop|status DIR | node-credentials DIR NAME | bootstrap-kubeconfig DIR | proxy-credentials DIR"
}

find_bin_dir() {
    if [[ -n "${PYKUBELET_K8S_BIN_DIR:-}" ]]; then
        echo "$PYKUBELET_K8S_BIN_DIR"
        return
    fi
    "$here/controlplane-build.sh" --check \
        || die "no Kubernetes binaries built yet: run scripts/testbed/controlplane-build.sh (as root)"
}

# --- processes ---------------------------------------------------------------

component_pid() {
    # The pid of COMPONENT if it is running, from its pid file; the command
    # line must name DIR, so a recycled pid is never taken for ours.
    pid_from_file "$dir/run/$1.pid" "$dir/"
}

component_exited() {
    # Whether the process launch started for COMPONENT has ended (gone, or a zombie
    # not yet reaped). Only for the start-up that launched it, when its pid cannot
    # have been recycled yet. Not component_pid: while the process execs (setsid
    # into the component) its command line reads empty for a moment, and a busy
    # machine makes that moment long enough to be caught.
    local pid
    pid="$(pid_in_file "$dir/run/$1.pid")" || return 0
    ! process_running "$pid"
}

launch() {
    # Run a component in its own session (a Ctrl-C aimed at whoever called
    # start must not take the control plane down before its stop runs).
    local component="$1"
    shift
    setsid "$@" >>"$dir/logs/$component.log" 2>&1 </dev/null &
    local pid=$! tries=0
    echo "$pid" >"$dir/run/$component.pid"
    # Until the child has exec'd, its command line is still this script's;
    # wait for that so that component_pid recognises it from now on.
    while ((tries++ < 100)) && [[ -e "/proc/$pid" ]] && ! component_pid "$component" >/dev/null; do
        sleep 0.02
    done
}

stop_pids() {
    # TERM all at once (each shuts down gracefully in parallel), KILL whatever
    # is left after STOP_TIMEOUT.
    local pid waited=0 alive
    [[ $# -gt 0 ]] || return 0
    kill -TERM "$@" 2>/dev/null || true
    while true; do
        alive=()
        for pid in "$@"; do
            kill -0 "$pid" 2>/dev/null && alive+=("$pid")
        done
        [[ ${#alive[@]} -eq 0 ]] && return 0
        if ((waited >= STOP_TIMEOUT * 10)); then
            kill -KILL "${alive[@]}" 2>/dev/null || true
            return 0
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
}

stop_components() {
    local component pid pids=()
    for component in "${COMPONENTS[@]}"; do
        if pid="$(component_pid "$component")"; then
            pids+=("$pid")
        fi
    done
    # A component still running from DIR without its pid file (a start
    # interrupted at the wrong moment): one of ours by name, with DIR in its
    # arguments.
    local program args
    for pid in $(pgrep -f -- "$dir/" || true); do
        [[ "$pid" == "$$" ]] && continue
        program="$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | head -n 1)" || continue
        program="$(basename "$program")"
        [[ " ${COMPONENTS[*]} " == *" $program "* ]] || continue
        args="$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline")" || continue
        [[ "$args" == *"$dir/"* ]] && pids+=("$pid")
    done
    stop_pids "${pids[@]}"
}

# --- waiting -----------------------------------------------------------------

wait_ready() {
    # wait_ready COMPONENT URL PATTERN CURL-ARGS...: poll URL until its body
    # matches the glob PATTERN; fail at once when the component exits, and with its
    # log when the time is up.
    local component="$1" url="$2" expected="$3" deadline body
    shift 3
    deadline=$((SECONDS + READY_TIMEOUT))
    while true; do
        if component_exited "$component"; then
            show_log "$component"
            [[ -s "$dir/logs/$component.log" ]] || log "$dir/logs/$component.log is empty"
            die "$component exited during start-up"
        fi
        body="$(curl -sS --max-time 5 "$@" "$url" 2>/dev/null || true)"
        # shellcheck disable=SC2053
        [[ "$body" == $expected ]] && return 0
        if ((SECONDS >= deadline)); then
            show_log "$component"
            die "$component not ready at $url after ${READY_TIMEOUT}s (last answer: ${body:-none})"
        fi
        sleep 0.5
    done
}

# --- certificates ------------------------------------------------------------

new_key() {
    openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null
    chmod 600 "$1"
}

new_ca() {
    # new_ca PREFIX NAME: a self-signed CA in PREFIX.key and PREFIX.crt.
    local prefix="$1" name="$2"
    new_key "$prefix.key"
    openssl req -x509 -new -sha256 -key "$prefix.key" -days "$CERT_DAYS" \
        -subj "/CN=$name-$(basename "$dir")" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
        -out "$prefix.crt" 2>/dev/null || die "openssl could not create the CA $name"
}

issue_cert() {
    # issue_cert PREFIX SUBJECT USAGE [SAN...]: PREFIX.key and PREFIX.crt signed
    # by the cluster CA (or the CA at $ISSUER.crt/.key); USAGE is serverAuth,
    # clientAuth or serverAuth,clientAuth.
    local prefix="$1" subject="$2" usage="$3" ca="${ISSUER:-$dir/pki/ca}" ext sans=""
    shift 3
    new_key "$prefix.key"
    ext="$(mktemp "$dir/pki/ext.XXXXXX")"
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$usage"
        if [[ $# -gt 0 ]]; then
            sans="$(IFS=,; echo "$*")"
            echo "subjectAltName=$sans"
        fi
    } >"$ext"
    openssl req -new -key "$prefix.key" -subj "$subject" 2>/dev/null \
        | openssl x509 -req -sha256 -days "$CERT_DAYS" -CA "$ca.crt" -CAkey "$ca.key" \
            -set_serial "0x$(openssl rand -hex 16)" -extfile "$ext" -out "$prefix.crt" 2>/dev/null \
        || { rm -f "$ext"; die "openssl could not issue a certificate for $subject"; }
    rm -f "$ext"
}

b64() { base64 -w0 <"$1"; }

write_kubeconfig() {
    # write_kubeconfig FILE USER (cert KEYPREFIX | token TOKEN)
    local file="$1" user="$2" kind="$3" credential="$4" auth
    if [[ "$kind" == cert ]]; then
        auth="    client-certificate-data: $(b64 "$credential.crt")
    client-key-data: $(b64 "$credential.key")"
    else
        auth="    token: $credential"
    fi
    cat >"$file.partial" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: pykubelet-testbed
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(b64 "$dir/pki/ca.crt")
users:
- name: $user
  user:
$auth
contexts:
- name: $user@pykubelet-testbed
  context:
    cluster: pykubelet-testbed
    user: $user
current-context: $user@pykubelet-testbed
EOF
    chmod 600 "$file.partial"
    mv "$file.partial" "$file"
}

free_ports() {
    # N distinct ports the kernel considers free right now on 127.0.0.1.
    python3 - "$1" <<'PY'
import socket
import sys

sockets = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    sockets.append(s)
print(" ".join(str(s.getsockname()[1]) for s in sockets))
PY
}

audit_args() {
    # The kube-apiserver flags of PYKUBELET_CONTROLPLANE_AUDIT=1 (none otherwise), after
    # writing the policy: the nodes' requests only, at Metadata (who, verb, object,
    # answer code; no bodies), one line per request at ResponseComplete (a watch's
    # line comes when it ends). Blocking mode: a request's line is written before
    # its answer goes out, so a reader who saw the answer finds the line.
    case "$AUDIT" in
        "" | 0) return 0 ;;
        1) ;;
        *) die "PYKUBELET_CONTROLPLANE_AUDIT=$AUDIT: expected 1 or 0" ;;
    esac
    cat >"$dir/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  userGroups: ["system:nodes"]
- level: None
EOF
    echo "--audit-policy-file=$dir/audit-policy.yaml" "--audit-log-path=$dir/logs/audit.log" \
        --audit-log-format=json --audit-log-mode=blocking
}

# --- commands ----------------------------------------------------------------

load_env() {
    [[ -s "$dir/env" ]] || die "$dir/env missing: is a control plane started in $dir?"
    # shellcheck disable=SC1091
    source "$dir/env"
}

cmd_status() {
    local component
    [[ -s "$dir/env" ]] || return 1
    for component in "${COMPONENTS[@]}"; do
        component_pid "$component" >/dev/null || { log "$component is not running"; return 1; }
    done
    load_env
    [[ "$(curl -sS --max-time 5 --cacert "$CA_CERT" "$APISERVER_URL/readyz" 2>/dev/null)" == ok ]] \
        || { log "kube-apiserver at $APISERVER_URL is not ready"; return 1; }
    cat "$dir/env"
}

cmd_start() {
    local bin_dir
    bin_dir="$(find_bin_dir)"
    local binary
    for binary in kube-apiserver kube-controller-manager kube-scheduler; do
        [[ -x "$bin_dir/$binary" ]] || die "$bin_dir/$binary missing: run controlplane-build.sh"
    done
    command -v etcd >/dev/null || die "etcd missing: run controlplane-build.sh (installs etcd-server)"
    for binary in openssl curl python3; do
        command -v "$binary" >/dev/null || die "$binary missing"
    done

    if cmd_status >/dev/null 2>&1; then
        log "already running in $dir"
        return 0
    fi
    if [[ -e "$dir" ]]; then
        [[ -e "$dir/$MARKER" || -z "$(ls -A "$dir")" ]] \
            || die "$dir exists and is not a control plane directory"
        stop_components
        rm -rf "$dir"
    fi
    mkdir -p "$dir/pki" "$dir/logs" "$dir/run" "$dir/nodes" "$dir/etcd"
    chmod 700 "$dir/pki" "$dir/etcd"
    touch "$dir/$MARKER"
    # Stop whatever did start when start-up fails; the logs stay in DIR for
    # the caller (whose stop deletes it).
    trap 'status=$?; if [[ $status -ne 0 ]]; then stop_components; fi; exit $status' EXIT

    local etcd_port etcd_peer_port apiserver_port kcm_port scheduler_port
    read -r etcd_port etcd_peer_port apiserver_port kcm_port scheduler_port <<<"$(free_ports 5)"
    # Where kube-apiserver listens, what it advertises, and what its endpoint
    # reconciler does: without an advertise address, loopback and no endpoint for
    # the `kubernetes` Service (pods could not use 127.0.0.1 anyway).
    local apiserver_address=127.0.0.1 reconciler=none extra_sans=() aggregator_routing=false
    if [[ -n "$ADVERTISE_ADDRESS" ]]; then
        [[ "$ADVERTISE_ADDRESS" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] \
            || die "PYKUBELET_CONTROLPLANE_ADVERTISE_ADDRESS=$ADVERTISE_ADDRESS is not an IPv4 address"
        [[ -n "$(ip -4 -o addr show to "$ADVERTISE_ADDRESS/32" 2>/dev/null)" ]] \
            || die "$ADVERTISE_ADDRESS is not an address of this host (create the test hosts first)"
        apiserver_address=$ADVERTISE_ADDRESS
        reconciler=lease
        extra_sans=("IP:$ADVERTISE_ADDRESS")
        # Services reached by endpoint IP (the pod CIDRs are routed from this host), not
        # by ClusterIP: no kube-proxy runs on this host (it would rewrite its iptables).
        aggregator_routing=true
    fi
    APISERVER_URL="https://$apiserver_address:$apiserver_port"
    local pki="$dir/pki" etcd_url="https://127.0.0.1:$etcd_port" audit_flags audit=()
    # Apart from the read: a die in audit_args must stop the start (set -e).
    audit_flags="$(audit_args)"
    read -r -a audit <<<"$audit_flags"

    new_ca "$pki/ca" pykubelet-testbed-ca
    # The aggregation layer's own CA, as kubeadm keeps it apart: the API
    # server proxies with it, and the controller manager and scheduler read
    # it to trust proxied requests (their logs complain without it).
    new_ca "$pki/front-proxy-ca" pykubelet-testbed-front-proxy-ca
    ISSUER="$pki/front-proxy-ca" issue_cert "$pki/front-proxy-client" "/CN=front-proxy-client" \
        clientAuth
    openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null || die "openssl could not create sa.key"
    chmod 600 "$pki/sa.key"
    openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
    issue_cert "$pki/etcd-server" "/CN=etcd-server" serverAuth "IP:127.0.0.1" "DNS:localhost"
    issue_cert "$pki/apiserver-etcd-client" "/O=system:masters/CN=kube-apiserver-etcd-client" clientAuth
    issue_cert "$pki/apiserver" "/CN=kube-apiserver" serverAuth \
        "IP:127.0.0.1" "IP:$SERVICE_CLUSTER_IP" "DNS:localhost" "DNS:kubernetes" \
        "DNS:kubernetes.default" "DNS:kubernetes.default.svc" \
        "DNS:kubernetes.default.svc.cluster.local" ${extra_sans[@]+"${extra_sans[@]}"}
    issue_cert "$pki/apiserver-kubelet-client" \
        "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    issue_cert "$pki/admin" "/O=system:masters/CN=kubernetes-admin" clientAuth
    issue_cert "$pki/controller-manager" "/CN=system:kube-controller-manager" clientAuth
    issue_cert "$pki/scheduler" "/CN=system:kube-scheduler" clientAuth
    write_kubeconfig "$dir/admin.kubeconfig" kubernetes-admin cert "$pki/admin"
    write_kubeconfig "$dir/controller-manager.kubeconfig" system:kube-controller-manager \
        cert "$pki/controller-manager"
    write_kubeconfig "$dir/scheduler.kubeconfig" system:kube-scheduler cert "$pki/scheduler"

    launch etcd etcd --name default --data-dir "$dir/etcd" \
        --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
        --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
        --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
        --initial-cluster "default=http://127.0.0.1:$etcd_peer_port" \
        --cert-file="$pki/etcd-server.crt" --key-file="$pki/etcd-server.key" \
        --client-cert-auth --trusted-ca-file="$pki/ca.crt" --logger=zap
    wait_ready etcd "$etcd_url/health" '*"health":"true"*' --cacert "$pki/ca.crt" \
        --cert "$pki/apiserver-etcd-client.crt" --key "$pki/apiserver-etcd-client.key"

    launch kube-apiserver "$bin_dir/kube-apiserver" \
        --bind-address="$apiserver_address" --advertise-address="$apiserver_address" \
        --secure-port="$apiserver_port" --insecure-port=0 \
        --etcd-servers="$etcd_url" --etcd-cafile="$pki/ca.crt" \
        --etcd-certfile="$pki/apiserver-etcd-client.crt" \
        --etcd-keyfile="$pki/apiserver-etcd-client.key" \
        --cert-dir="$pki" \
        --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
        --client-ca-file="$pki/ca.crt" \
        --requestheader-client-ca-file="$pki/front-proxy-ca.crt" \
        --requestheader-allowed-names=front-proxy-client \
        --requestheader-username-headers=X-Remote-User \
        --requestheader-group-headers=X-Remote-Group \
        --requestheader-extra-headers-prefix=X-Remote-Extra- \
        --proxy-client-cert-file="$pki/front-proxy-client.crt" \
        --proxy-client-key-file="$pki/front-proxy-client.key" \
        --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
        --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
        --kubelet-preferred-address-types=InternalIP,Hostname,InternalDNS,ExternalDNS,ExternalIP \
        --service-account-key-file="$pki/sa.pub" \
        --service-account-signing-key-file="$pki/sa.key" \
        --service-account-issuer="$SERVICE_ACCOUNT_ISSUER" \
        --service-cluster-ip-range="$SERVICE_CLUSTER_IP_RANGE" \
        --authorization-mode=Node,RBAC \
        --enable-admission-plugins=NodeRestriction \
        --enable-bootstrap-token-auth=true \
        --allow-privileged=true \
        --endpoint-reconciler-type="$reconciler" \
        --enable-aggregator-routing="$aggregator_routing" \
        --feature-gates=BoundServiceAccountTokenVolume=true \
        ${audit[@]+"${audit[@]}"} \
        --profiling=false --v=1
    wait_ready kube-apiserver "$APISERVER_URL/readyz" ok --cacert "$pki/ca.crt"

    launch kube-controller-manager "$bin_dir/kube-controller-manager" \
        --kubeconfig="$dir/controller-manager.kubeconfig" \
        --authentication-kubeconfig="$dir/controller-manager.kubeconfig" \
        --authorization-kubeconfig="$dir/controller-manager.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port="$kcm_port" --port=0 \
        --cert-dir="$dir/pki/controller-manager-serving" \
        --client-ca-file="$pki/ca.crt" \
        --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
        --root-ca-file="$pki/ca.crt" \
        --service-account-private-key-file="$pki/sa.key" \
        --use-service-account-credentials=true \
        --service-cluster-ip-range="$SERVICE_CLUSTER_IP_RANGE" \
        --allocate-node-cidrs=false \
        --controllers='*,bootstrapsigner,tokencleaner' \
        ${SIGNING_DURATION:+--cluster-signing-duration="$SIGNING_DURATION"} \
        --leader-elect=false --profiling=false --v=1
    launch kube-scheduler "$bin_dir/kube-scheduler" \
        --kubeconfig="$dir/scheduler.kubeconfig" \
        --authentication-kubeconfig="$dir/scheduler.kubeconfig" \
        --authorization-kubeconfig="$dir/scheduler.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port="$scheduler_port" --port=0 \
        --cert-dir="$dir/pki/scheduler-serving" \
        --leader-elect=false --profiling=false --v=1
    wait_ready kube-controller-manager "https://127.0.0.1:$kcm_port/healthz" ok --insecure
    wait_ready kube-scheduler "https://127.0.0.1:$scheduler_port/healthz" ok --insecure

    cat >"$dir/env.partial" <<EOF
# Generated by scripts/testbed/controlplane.sh start.
CONTROLPLANE_DIR=$dir
KUBERNETES_BIN_DIR=$bin_dir
KUBERNETES_VERSION=$("$bin_dir/kube-apiserver" --version | awk '{print $2}')
APISERVER_URL=$APISERVER_URL
APISERVER_PORT=$apiserver_port
ETCD_URL=$etcd_url
ETCD_PORT=$etcd_port
ETCD_PEER_PORT=$etcd_peer_port
CONTROLLER_MANAGER_PORT=$kcm_port
SCHEDULER_PORT=$scheduler_port
ADMIN_KUBECONFIG=$dir/admin.kubeconfig
CA_CERT=$pki/ca.crt
CA_KEY=$pki/ca.key
APISERVER_KUBELET_CLIENT_CERT=$pki/apiserver-kubelet-client.crt
SERVICE_CLUSTER_IP_RANGE=$SERVICE_CLUSTER_IP_RANGE
SERVICE_ACCOUNT_ISSUER=$SERVICE_ACCOUNT_ISSUER
EOF
    if [[ -n "$ADVERTISE_ADDRESS" ]]; then
        echo "APISERVER_ADVERTISE_ADDRESS=$ADVERTISE_ADDRESS" >>"$dir/env.partial"
    fi
    if [[ ${#audit[@]} -gt 0 ]]; then
        echo "AUDIT_LOG=$dir/logs/audit.log" >>"$dir/env.partial"
    fi
    mv "$dir/env.partial" "$dir/env"
    trap - EXIT
    cat "$dir/env"
}

cmd_stop() {
    [[ -e "$dir" ]] || return 0
    [[ -e "$dir/$MARKER" || -z "$(ls -A "$dir")" ]] \
        || die "$dir is not a control plane directory; not deleting it"
    stop_components
    rm -rf "$dir"
}

valid_node_name() {
    # A DNS-1123 subdomain, as Node names must be.
    [[ ${#1} -le 253 && "$1" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$ ]]
}

cmd_node_credentials() {
    local name="$1" prefix
    valid_node_name "$name" || die "node name '$name' is not a DNS-1123 subdomain"
    load_env
    prefix="$dir/nodes/$name"
    if [[ ! -s "$prefix.kubeconfig" ]]; then
        issue_cert "$prefix" "/O=system:nodes/CN=system:node:$name" clientAuth
        write_kubeconfig "$prefix.kubeconfig" "system:node:$name" cert "$prefix"
    fi
    echo "$prefix.kubeconfig"
}

cmd_proxy_credentials() {
    load_env
    local prefix="$dir/pki/kube-proxy" file="$dir/kube-proxy.kubeconfig"
    if [[ ! -s "$file" ]]; then
        issue_cert "$prefix" "/CN=system:kube-proxy" clientAuth
        write_kubeconfig "$file" system:kube-proxy cert "$prefix"
    fi
    echo "$file"
}

cmd_bootstrap_kubeconfig() {
    load_env
    local file="$dir/bootstrap.kubeconfig" token_id token_secret
    if [[ -s "$file" ]]; then
        echo "$file"
        return 0
    fi
    # The kubectl built with the control plane (a machine's own may be of any version).
    local kubectl="$KUBERNETES_BIN_DIR/kubectl"
    [[ -x "$kubectl" ]] || die "$kubectl missing: run controlplane-build.sh"
    # A bootstrap token is "<6 chars>.<16 chars>" of [a-z0-9].
    token_id="$(openssl rand -hex 3)"
    token_secret="$(openssl rand -hex 8)"
    "$kubectl" --kubeconfig "$ADMIN_KUBECONFIG" apply -f - >/dev/null <<EOF || die "could not create the bootstrap token and its RBAC bindings"
apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-$token_id
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  description: pykubelet testbed node bootstrap token
  token-id: "$token_id"
  token-secret: "$token_secret"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: $BOOTSTRAP_GROUP
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:kubelet-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:node-bootstrapper
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: $BOOTSTRAP_GROUP
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:nodeclient
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: $BOOTSTRAP_GROUP
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-certificate-rotation
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:selfnodeclient
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:nodes
EOF
    write_kubeconfig "$file" "kubelet-bootstrap" token "$token_id.$token_secret"
    echo "$file"
}

main() {
    [[ $# -ge 2 ]] || usage
    local command="$1"
    dir="$(absolute_dir "$2")"
    [[ "$dir" != / ]] || die "refusing to use / as the control plane directory"
    case "$command" in
        start)
            [[ $# -eq 2 ]] || usage
            [[ $EUID -eq 0 ]] || die "must run as root"
            cmd_start
            ;;
        stop) [[ $# -eq 2 ]] || usage; cmd_stop ;;
        status) [[ $# -eq 2 ]] || usage; cmd_status ;;
        node-credentials) [[ $# -eq 3 ]] || usage; cmd_node_credentials "$3" ;;
        bootstrap-kubeconfig) [[ $# -eq 2 ]] || usage; cmd_bootstrap_kubeconfig ;;
        proxy-credentials) [[ $# -eq 2 ]] || usage; cmd_proxy_credentials ;;
        *) usage ;;
    esac
}

main "$@"
