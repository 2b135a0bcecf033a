#!/usr/bin/env bash
# Installs what ferry needs to build and test on Debian 12 (run as root).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs=(build-essential cmake pkg-config git ca-certificates
      libsqlite3-dev sqlite3 libyaml-dev libjansson-dev libcmocka-dev
      jq bc procps psmisc util-linux python3 python3-crcmod curl zstd
      postgresql postgresql-contrib libpq-dev
      libsnappy-dev zlib1g-dev libzstd-dev libcurl4-openssl-dev
      libmicrohttpd-dev chromium libnats-dev nats-server openssl
      mariadb-server mariadb-client libmariadb-dev libsodium-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Independent readers for the files ferry writes (tests/tools: hyparquet, DuckDB), pinned by
# tests/tools/package-lock.json. Debian's nodejs/npm when no node is installed.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nodejs npm
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
npm ci --prefix "$here/tests/tools" --no-audit --no-fund
