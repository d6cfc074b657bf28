#!/usr/bin/env bash
# Installs every Debian 12 package Ferry's build, tests and tools need.
# Quick no-op when everything is already installed. Run as root (or via sudo).
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config ccache git
  # libraries
  libcaf-dev liblmdb-dev prometheus-cpp-dev liblz4-dev libzstd-dev zlib1g-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libboost-dev
  libssl-dev  # TLS: libcaf_openssl's OpenSSL, and ferry's certificate checks
  libgsasl-dev  # SCRAM-SHA-256 credentials and exchanges (broker/security.hpp)
  libgoogle-perftools-dev  # tcmalloc, ferryd's allocator (CMakeLists.txt)
  qt6-base-dev qt6-charts-dev libqt6opengl6-dev  # Qt6Charts CMake config needs Qt6OpenGL
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev  # libFuzzer + ASan/UBSan runtimes: tests/fuzz
  # tools used by tests, demos and benchmark comparisons
  curl fio xvfb python3 prometheus openssl
  python3-kafka python3-lz4 python3-zstandard  # make_kafka_vectors.py; tests/kafka
  kcat  # tests/kafka: a librdkafka client against the Kafka listener
  python3-confluent-kafka  # tests/kafka: librdkafka's Python binding (idempotence, cooperative-sticky)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# Never auto-start services that packages may ship (no init system runs here anyway).
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
