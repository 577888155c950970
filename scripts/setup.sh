#!/usr/bin/env bash
# Installs what zeroc needs to build and test on Debian 12 (bookworm).
# As root it runs apt-get; otherwise it prints the exact command and stops.
# With --fuzz, also clang-19 and its runtime libraries (libFuzzer, the
# sanitizers) for bench/fuzz.sh; the ordinary build and tests need neither.
set -euo pipefail

packages=(
  cmake ninja-build g++ python3
  llvm-19-dev libmlir-19-dev mlir-19-tools llvm-19-tools
  nlohmann-json3-dev libfmt-dev libgtest-dev
  openmpi-bin libopenmpi-dev libopenblas-dev
)
for arg in "$@"; do
  case "$arg" in
  --fuzz) packages+=(clang-19 libclang-rt-19-dev libomp-19-dev) ;;
  *)
    echo "usage: scripts/setup.sh [--fuzz]" >&2
    exit 2
    ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    # python3 may come from elsewhere (pyenv); any python3 on PATH will do.
    if [ "$p" = python3 ] && command -v python3 >/dev/null; then continue; fi
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "zeroc needs these Debian packages: ${missing[*]}" >&2
  echo "Install them as root with:" >&2
  echo "  apt-get update && $cmd" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
