#!/usr/bin/env bash
# Installs the Debian packages ferry needs to build, test and run its demo. Idempotent.
set -euo pipefail
PKGS=(build-essential cmake make pkg-config ccache time
  libdnnl-dev ocl-icd-opencl-dev libonnx-dev libprotobuf-dev protobuf-compiler
  libflatbuffers-dev flatbuffers-compiler libxxhash-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev libjpeg62-turbo-dev libturbojpeg0-dev libpng-dev libgloo-dev clang libclang-rt-14-dev
  libboost-dev rapidjson-dev libsimdjson-dev curl python3-requests libgrpc++-dev protobuf-compiler-grpc python3-grpcio python3-protobuf
  python3 python3-numpy python3-onnx python3-torch python3-torchvision python3-sklearn
  python3-dev python3-venv python3-pip python3-setuptools python3-wheel pybind11-dev python3-pybind11 python3-pytest)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "setup: missing packages: ${missing[*]}" >&2
    echo "setup: run as root: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else SUDO=""; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
