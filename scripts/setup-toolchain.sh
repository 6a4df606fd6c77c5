#!/usr/bin/env bash
# Installs what building and testing Sluice needs on a fresh Debian machine.
# Idempotent: installs only what is missing.
#
# Plugins are compiled to WebAssembly by one of two routes (see
# cli/src/build.rs): rustup's wasm32-wasip2 target, or — where rustup cannot
# download targets — Debian's rustc-web with its std sources and lld-19.
set -euo pipefail

apt_missing=()
want_apt() {
  for package in "$@"; do
    dpkg -s "$package" >/dev/null 2>&1 || apt_missing+=("$package")
  done
}

# Native build prerequisites (wasmtime and friends build with a C toolchain).
command -v cc >/dev/null 2>&1 || want_apt gcc
command -v pkg-config >/dev/null 2>&1 || want_apt pkg-config

if rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  echo "setup: rustup target wasm32-wasip2 present"
elif timeout 300 rustup target add wasm32-wasip2; then
  echo "setup: installed rustup target wasm32-wasip2"
else
  echo "setup: rustup could not install wasm32-wasip2; plugins will use Debian rustc-web + build-std"
fi
# The build-std route is always installed: it is the fallback where rustup
# cannot download targets, and the tests check that both routes build
# plugins that behave identically.
want_apt rustc-web rust-web-src lld-19

if [ "${#apt_missing[@]}" -gt 0 ]; then
  echo "setup: installing ${apt_missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_missing[@]}"
fi

rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy
echo "setup: toolchain ready"
