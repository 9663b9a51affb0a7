#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds tests/install_consumer against it with
# find_package(halfgrad), and runs the result.
set -euo pipefail
build_dir=$1
source_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > /dev/null
cmake -S "$source_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$work/build" -j 2 > /dev/null
"$work/build/consumer"
