#!/usr/bin/env bash
# Builds the Kubernetes components, etcd, helm and versitygw (an S3 server) from Go modules and
# caches them outside the checkout, keyed by version and by the module's go.sum, so a fresh clone
# reuses them. Prints each binary's absolute path on its own line (stdout); progress goes to
# stderr.
#
# Usage: tools/build.sh [TOOL ...]   (default: kube-apiserver etcd helm, what the API-only
#        tests need; `tools/build.sh node` adds what a local node runs)
# TOOL: kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy coredns etcd helm versitygw node
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache_root=${SCRAPEQ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/scrapeq}

if ! command -v go >/dev/null 2>&1; then
  echo "error: the Go toolchain is needed to build the Kubernetes components, etcd and helm; install Go 1.24 or newer" >&2
  exit 1
fi

# Measured on a 2-core machine with an empty Go build cache; later builds of another component
# reuse the shared packages and take a fraction of this.
declare -A first_build_seconds=(
  [kube-apiserver]=350 [kube-controller-manager]=120 [kube-scheduler]=40 [kubelet]=210
  [kube-proxy]=40 [coredns]=90 [etcd]=45 [helm]=95 [versitygw]=150
)

# Waits up to $2 seconds for background job $1; true once it has ended (its status is kept for
# a later `wait`).
wait_with_timeout() {
  local job=$1 seconds=$2 waited=0
  while kill -0 "$job" 2>/dev/null; do
    [ "$waited" -ge "$((seconds * 10))" ] && return 1
    sleep 0.1
    waited=$((waited + 1))
  done
  return 0
}

build_one() {
  local tool=$1 version module package ldflags
  case "$tool" in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy)
      version=$KUBERNETES_VERSION
      module=kubernetes
      package=k8s.io/kubernetes/cmd/$tool
      local minor=${version#v1.}; minor=${minor%%.*}
      # Without these, /version reports v0.0.0-master and clients warn about skew.
      ldflags="-X k8s.io/component-base/version.gitVersion=${version} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/component-base/version.gitTreeState=clean"
      ;;
    etcd)
      version=$ETCD_VERSION
      module=etcd
      package=go.etcd.io/etcd/server/v3
      ldflags="-X go.etcd.io/etcd/api/v3/version.GitSHA=module-${version}"
      ;;
    coredns)
      version=$COREDNS_VERSION
      module=coredns
      # The module's own main package: CoreDNS with the few plugins the local node uses.
      package=scrapeq.io/tools/coredns
      ldflags="-X github.com/coredns/coredns/coremain.GitCommit=module-${version}"
      ;;
    helm)
      version=$HELM_VERSION
      module=helm
      package=helm.sh/helm/v3/cmd/helm
      ldflags="-X helm.sh/helm/v3/internal/version.version=${version} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
      ;;
    versitygw)
      version=$VERSITYGW_VERSION
      module=versitygw
      package=github.com/versity/versitygw/cmd/versitygw
      ldflags="-X main.Version=${version} -X main.Build=module-${version}"
      ;;
    *)
      echo "error: unknown tool '$tool' (known: kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy coredns etcd helm versitygw node)" >&2
      return 2
      ;;
  esac
  local module_dir="$here/$module"
  local sum_key
  # A module with code of its own (coredns/main.go) is keyed by that code too.
  local keyed=("$module_dir/go.sum")
  [ ! -f "$module_dir/main.go" ] || keyed+=("$module_dir/main.go")
  sum_key=$(cat "${keyed[@]}" | sha256sum | cut -c1-12)
  local target_dir="$cache_root/bin/${tool}-${version}-${sum_key}"
  local binary="$target_dir/$tool"
  if [ ! -x "$binary" ]; then
    mkdir -p "$target_dir"
    # One build per tool at a time: a second caller (another shell, a test fixture) waits
    # for the first and then finds the binary.
    exec {lock}>"$target_dir/.lock"
    flock "$lock"
    if [ ! -x "$binary" ]; then
      local expected=${first_build_seconds[$tool]}
      echo ">> [${SCRAPEQ_BUILD_STEP:-1/1}] building $tool $version from $package (first time only, about ${expected}s on 2 cores; cached in $target_dir)" >&2
      local started=$SECONDS
      # Build to a temporary name and rename, so an interrupted build never leaves a
      # half-written binary that a later run would trust.
      (cd "$module_dir" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath \
          -ldflags "-s -w ${ldflags}" -o "$binary.partial.$$" "$package") &
      local build=$!
      # A first build takes minutes: say that it is still going at least every 15 s.
      while ! wait_with_timeout "$build" 15; do
        echo ">>   still building $tool: $((SECONDS - started))s of about ${expected}s" >&2
      done
      wait "$build"
      mv "$binary.partial.$$" "$binary"
      echo ">> built $tool in $((SECONDS - started))s" >&2
    fi
    exec {lock}>&-
  fi
  echo "$binary"
}

[ $# -gt 0 ] || set -- kube-apiserver etcd helm
tools=()
for tool in "$@"; do
  case "$tool" in
    node) tools+=(kube-apiserver etcd kube-controller-manager kube-scheduler kubelet kube-proxy coredns) ;;
    *) tools+=("$tool") ;;
  esac
done
count=${#tools[@]}
step=0
for tool in "${tools[@]}"; do
  step=$((step + 1))
  SCRAPEQ_BUILD_STEP="$step/$count" build_one "$tool"
done
