#!/usr/bin/env bash
# Installs what building and testing Sluice needs on a fresh Debian machine.
# Idempotent: installs only what is missing.
#
#   scripts/setup-toolchain.sh               everything: every plugin language,
#                                            the lakehouse example's Python tools,
#                                            what the tests drive (the test command runs this)
#   scripts/setup-toolchain.sh --quickstart  only what the quickstart needs: the
#                                            host's build prerequisites and the
#                                            Rust plugin target (README command 1)
#   scripts/setup-toolchain.sh --system      everything but the Python and npm
#                                            packages: what building needs
#   scripts/setup-toolchain.sh --packages    only the Python and npm packages (the
#                                            test command installs them while it builds)
#
# Plugin toolchains (see cli/src/build/):
# * Rust: rustup's wasm32-wasip2 target, or — where rustup cannot download
#   targets — Debian's rustc-web with its std sources and lld-19.
# * Python: componentize-py from PyPI.
# * JavaScript: componentize-js from npm, into ~/.cache/sluice/js-toolchain
#   (versions pinned by scripts/js-toolchain/package-lock.json).
# * C: Debian's clang-19 with its wasm32 runtime, and wasi-libc.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
quickstart=false
system=true
packages=true
case "${1:-}" in
  --quickstart) quickstart=true ;;
  --system) packages=false ;;
  --packages) system=false ;;
  "") ;;
  *) echo "usage: setup-toolchain.sh [--quickstart|--system|--packages]" >&2; exit 2 ;;
esac

apt_missing=()
want_apt() {
  for package in "$@"; do
    dpkg -s "$package" >/dev/null 2>&1 || apt_missing+=("$package")
  done
}
install_apt_missing() {
  if [ "${#apt_missing[@]}" -gt 0 ]; then
    echo "setup: installing ${apt_missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_missing[@]}"
  fi
}

install_system() {
  # Native build prerequisites (wasmtime and friends build with a C toolchain).
  command -v cc >/dev/null 2>&1 || want_apt gcc
  command -v pkg-config >/dev/null 2>&1 || want_apt pkg-config

  rustup_target=true
  if rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    echo "setup: rustup target wasm32-wasip2 present"
  elif timeout 300 rustup target add wasm32-wasip2; then
    echo "setup: installed rustup target wasm32-wasip2"
  else
    rustup_target=false
    echo "setup: rustup could not install wasm32-wasip2; plugins will use Debian rustc-web + build-std"
  fi
  # The build-std route is installed except for the quickstart with the rustup
  # target: it is the fallback where rustup cannot download targets, and the
  # tests check that both routes build plugins that behave identically.
  if ! $quickstart || ! $rustup_target; then
    want_apt rustc-web rust-web-src lld-19
  fi
  # RocksDB state: linked from Debian's library (see .cargo/config.toml).
  want_apt librocksdb-dev libclang-dev
  # JSON records are checked and their fields found with simdjson (the host's
  # sluice-json crate, json/src/scan.rs), linked from Debian's library; g++ builds its C++ half.
  want_apt libsimdjson-dev g++
  if $quickstart; then
    install_apt_missing
    echo "setup: ready for the quickstart (scripts/setup-toolchain.sh without --quickstart installs the rest)"
    exit 0
  fi
  # C plugins.
  want_apt clang-19 libclang-rt-19-dev-wasm32 wasi-libc
  # Observability tests: `promtool check metrics` (Prometheus) and a real
  # browser for the dashboard (Debian's chromium, driven by playwright-core).
  want_apt prometheus chromium

  install_apt_missing
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy
}
if $system; then
  install_system
fi
if ! $packages; then
  echo "setup: ready to build (scripts/setup-toolchain.sh --packages installs the Python and npm packages)"
  exit 0
fi

# Python plugins.
componentize_py_version=0.25.1
if [ "$(componentize-py --version 2>/dev/null | awk '{print $2}')" = "$componentize_py_version" ]; then
  echo "setup: componentize-py $componentize_py_version present"
else
  python3 -m pip install --quiet --disable-pip-version-check "componentize-py==$componentize_py_version"
  echo "setup: installed componentize-py $componentize_py_version"
fi

# Independent readers and writers for the tests: pyiceberg reads back every
# Iceberg table Sluice writes; Confluent's own Python client produces
# registry-framed Avro.
tools_venv="$HOME/.cache/sluice/venv-tools"
pyiceberg_version=0.11.1
confluent_kafka_version=2.16.1
if "$tools_venv/bin/python" -c "
import sys, pyiceberg, confluent_kafka, fastavro
sys.exit(pyiceberg.__version__ != '$pyiceberg_version' or confluent_kafka.__version__ != '$confluent_kafka_version')" 2>/dev/null; then
  echo "setup: pyiceberg $pyiceberg_version and confluent-kafka $confluent_kafka_version present"
else
  python3 -m venv "$tools_venv"
  "$tools_venv/bin/pip" install --quiet --disable-pip-version-check \
    "pyiceberg[sql-sqlite,pyarrow]==$pyiceberg_version" \
    "confluent-kafka[avro,schemaregistry]==$confluent_kafka_version"
  echo "setup: installed pyiceberg $pyiceberg_version and confluent-kafka $confluent_kafka_version into $tools_venv"
fi

# npm packages, each from a committed lock file into a cache directory:
# reinstalled when the lock file changes or the package is missing.
npm_install() { # source dir, cache dir, path that must exist, name
  local from="$1" to="$2" present="$3" name="$4"
  if cmp -s "$from/package-lock.json" "$to/package-lock.json" && [ -e "$to/$present" ]; then
    echo "setup: $name present"
  else
    mkdir -p "$to"
    cp "$from/package.json" "$from/package-lock.json" "$to/"
    (cd "$to" && npm ci --no-audit --no-fund --loglevel=error)
    echo "setup: installed $name into $to"
  fi
}

# JavaScript plugins.
npm_install "$here/js-toolchain" "$HOME/.cache/sluice/js-toolchain" \
  node_modules/.bin/componentize-js componentize-js
# The dashboard's browser test: playwright-core only (it drives the system
# chromium; Playwright's own browser download cannot work here).
npm_install "$here/browser-test" "$HOME/.cache/sluice/browser-test" \
  node_modules/playwright-core playwright-core

echo "setup: toolchain ready"
