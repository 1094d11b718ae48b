#!/usr/bin/env bash
# Installs Debian's nftables (for the fault tests' packet loss inside a worker's
# network namespace; this kernel has no netem) when running as root without nft.
# Idempotent; as another user it does nothing (those tests then skip).
set -euo pipefail
if [ "$(id -u)" != 0 ] || command -v nft >/dev/null; then
  exit 0
fi
apt-cache show nftables >/dev/null 2>&1 || apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nftables >/dev/null
echo "setup_netfaults: $(command -v nft)"
