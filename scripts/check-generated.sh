#!/usr/bin/env bash
# Regenerates proto/inference with the pinned plugins and fails if the
# committed code differs.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
out=$(mktemp -d)
trap 'rm -rf "$bin" "$out"' EXIT
(cd proto && PATH="$bin:$PATH" protoc --go_out="$out" --go_opt=paths=source_relative \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative inference/grpc_service.proto)
if ! diff -r "$out/inference" proto/inference --exclude='*.proto' >/dev/null; then
  echo "proto/inference is stale: run 'go generate ./proto'"; diff -r "$out/inference" proto/inference --exclude='*.proto' | head -20
  exit 1
fi
echo "proto/inference matches its .proto"
