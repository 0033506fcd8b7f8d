#!/usr/bin/env bash
# Installs the Debian packages scrapeq's tests and demo run for real, when they are missing:
# Chromium (the worker's browser), Prometheus (+ promtool), PostgreSQL 15 server binaries,
# openssl (control-plane certificates), tinyproxy and microsocks (the upstream-proxy tests),
# PgBouncer (the pooled-mode tests and the fleet benchmark). Needs root for apt-get; otherwise
# says what to run.
#
# Usage: scripts/ensure-system-packages.sh [node]
#   node: also what container images and the local node need (`make images`,
#         `make cluster-up`): podman, mmdebstrap (base images from Debian packages), gcc +
#         libc6-dev (the static pause binary), containerd (and its ctr client), runc, the CNI
#         plugins, iptables and conntrack (kube-proxy).
set -euo pipefail

declare -A wanted=(
  [chromium]=/usr/bin/chromium
  [chromium-headless-shell]=/usr/bin/chromium-headless-shell
  [prometheus]=/usr/bin/prometheus
  [postgresql-15]=/usr/lib/postgresql/15/bin/initdb
  [openssl]=/usr/bin/openssl
  # A real forward proxy with authentication for the workers' upstream-proxy tests.
  [tinyproxy]=/usr/bin/tinyproxy
  # A real SOCKS5 proxy with authentication for the workers' socks5:// upstream tests.
  [microsocks]=/usr/bin/microsocks
  # Transaction pooling in front of the test PostgreSQL (pooled-mode tests, fleet benchmark).
  [pgbouncer]=/usr/sbin/pgbouncer
)
for group in "$@"; do
  case "$group" in
    node)
      wanted+=(
        [podman]=/usr/bin/podman
        [mmdebstrap]=/usr/bin/mmdebstrap
        [gcc]=/usr/bin/gcc
        [libc6-dev]=/usr/include/stdio.h
        [containerd]=/usr/bin/containerd
        [runc]=/usr/sbin/runc
        [containernetworking-plugins]=/usr/lib/cni/bridge
        [iptables]=/usr/sbin/iptables
        [conntrack]=/usr/sbin/conntrack
      )
      ;;
    *)
      echo "error: unknown package group '$group' (known: node)" >&2
      exit 2
      ;;
  esac
done
missing=()
for package in "${!wanted[@]}"; do
  [ -e "${wanted[$package]}" ] || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo ">> installing Debian packages: ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=sudo
  else
    echo "error: these Debian packages are needed and installing them needs root:" >&2
    echo "         sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    echo "       run that once, then run make again." >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
progress="$(dirname "$0")/with-progress.sh"
log_dir=$(mktemp -d)
$SUDO "$progress" "[1/2] apt-get update" 20 "$log_dir/update.log" -- apt-get update -qq
$SUDO "$progress" "[2/2] apt-get install ${missing[*]}" 120 "$log_dir/install.log" -- \
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
rm -rf "$log_dir"
echo ">> installed ${missing[*]}" >&2
