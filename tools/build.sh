#!/usr/bin/env bash
# Builds the control-plane tools (kube-apiserver, etcd, helm) from Go modules and caches them
# outside the checkout, keyed by version and by the module's go.sum, so a fresh clone reuses
# them. Prints each binary's absolute path on its own line (stdout); progress goes to stderr.
#
# Usage: tools/build.sh [kube-apiserver|etcd|helm ...]   (default: all three)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache_root=${SCRAPEQ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/scrapeq}

if ! command -v go >/dev/null 2>&1; then
  echo "error: the Go toolchain is needed to build kube-apiserver, etcd and helm; install Go 1.24 or newer" >&2
  exit 1
fi

build_one() {
  local tool=$1 version package ldflags
  case "$tool" in
    kube-apiserver)
      version=$KUBERNETES_VERSION
      package=k8s.io/kubernetes/cmd/kube-apiserver
      local minor=${version#v1.}; minor=${minor%%.*}
      # Without these, /version reports v0.0.0-master and clients warn about skew.
      ldflags="-X k8s.io/component-base/version.gitVersion=${version} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/component-base/version.gitTreeState=clean"
      ;;
    etcd)
      version=$ETCD_VERSION
      package=go.etcd.io/etcd/server/v3
      ldflags="-X go.etcd.io/etcd/api/v3/version.GitSHA=module-${version}"
      ;;
    helm)
      version=$HELM_VERSION
      package=helm.sh/helm/v3/cmd/helm
      ldflags="-X helm.sh/helm/v3/internal/version.version=${version} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
      ;;
    *)
      echo "error: unknown tool '$tool' (known: kube-apiserver etcd helm)" >&2
      return 2
      ;;
  esac
  local module_dir="$here/$tool"
  local sum_key
  sum_key=$(sha256sum "$module_dir/go.sum" | cut -c1-12)
  local target_dir="$cache_root/bin/${tool}-${version}-${sum_key}"
  local binary="$target_dir/$tool"
  if [ ! -x "$binary" ]; then
    mkdir -p "$target_dir"
    # One build per tool at a time: a second caller (another shell, a test fixture) waits
    # for the first and then finds the binary.
    exec {lock}>"$target_dir/.lock"
    flock "$lock"
    if [ ! -x "$binary" ]; then
      echo ">> building $tool $version from $package (first time only; cached in $target_dir)" >&2
      local started=$SECONDS
      # Build to a temporary name and rename, so an interrupted build never leaves a
      # half-written binary that a later run would trust.
      (cd "$module_dir" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath \
          -ldflags "-s -w ${ldflags}" -o "$binary.partial.$$" "$package")
      mv "$binary.partial.$$" "$binary"
      echo ">> built $tool in $((SECONDS - started))s" >&2
    fi
    exec {lock}>&-
  fi
  echo "$binary"
}

tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(kube-apiserver etcd helm)
for tool in "${tools[@]}"; do
  build_one "$tool"
done
