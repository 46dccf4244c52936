#!/usr/bin/env bash
# Builds the release binaries (inferwatch, inferwatch-extproc,
# inferwatch-inject) into DIR (default bin/) the way they ship:
#
#   -tags grpcnotrace  grpc-go otherwise links golang.org/x/net/trace for
#                      its optional /debug/requests pages (inferwatch never
#                      enables them), and that package's html/template
#                      calls reflect's Method by name, which makes the
#                      linker keep every exported method of every type
#                      that can reach an interface. The tag takes
#                      inferwatch from 30.5 to 25.9 MB (its text and
#                      rodata from 20.8 to 17.6 MB), the two siblings
#                      from 28-30 to 21-22 MB, and, where the kernel maps
#                      the binary in large folios as here, ~3 MiB off the
#                      sidecar's RSS (docs/perf.md).
#   -trimpath          no build machine paths in the binary.
#
# INFERWATCH_VERSION, when set, is what `inferwatch version` prints
# (scripts/image.sh sets the chart's appVersion); unset, it prints "dev".
#
#   scripts/build.sh [DIR [PACKAGES...]]   (default: the checkout's bin/, ./cmd/...)
set -euo pipefail
dir=$(realpath -m "${1:-$(dirname "$0")/../bin}")
shift || true
cd "$(dirname "$0")/.."
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./cmd/...)
mkdir -p "$dir"
ldflags=()
[ -z "${INFERWATCH_VERSION:-}" ] || ldflags=(-ldflags "-X main.version=$INFERWATCH_VERSION")
go build -tags grpcnotrace -trimpath "${ldflags[@]}" -o "$dir/" "${pkgs[@]}"
