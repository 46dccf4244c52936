#!/usr/bin/env bash
# Regenerates what is generated and committed — proto/inference, tfserving
# and torchserve (protoc and the pinned plugins), the eBPF objects in bpf/
# (bpf2go: clang, llvm-strip, libbpf-dev) and gpu/cudaload/spin.ptx (clang) —
# and fails if the committed files differ. Regeneration is deterministic with Debian 12's clang 14.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
out=$(mktemp -d)
trap 'rm -rf "$bin" "$out"' EXIT
(cd proto && PATH="$bin:$PATH" protoc --go_out="$out" --go_opt=paths=source_relative \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
  inference/grpc_service.proto tfserving/tfserving.proto torchserve/torchserve.proto)
for pkg in inference tfserving torchserve; do
  if ! diff -r "$out/$pkg" "proto/$pkg" --exclude='*.proto' --exclude=doc.go >/dev/null; then
    echo "proto/$pkg is stale: run 'go generate ./proto'"; diff -r "$out/$pkg" "proto/$pkg" --exclude='*.proto' --exclude=doc.go | head -20
    exit 1
  fi
  echo "proto/$pkg matches its .proto"
done

# bpf2go writes beside its sources: hash, regenerate in place, compare.
gen=$(git ls-files 'bpf/*_bpfel.go' 'bpf/*_bpfel.o')
before=$(sha256sum $gen)
go generate ./bpf
if ! after=$(sha256sum $gen) || [[ "$before" != "$after" ]]; then
  echo "bpf/ objects were stale (regenerated now; commit them):"
  diff <(echo "$before") <(echo "$after") || true
  exit 1
fi
echo "bpf/ objects match their C sources"

clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_52 -nocudainc -nocudalib -O2 -S \
  -o "$out/spin.ptx" gpu/cudaload/spin.cu
if ! cmp -s "$out/spin.ptx" gpu/cudaload/spin.ptx; then
  echo "gpu/cudaload/spin.ptx is stale: regenerate it (the command is in spin.cu)"
  diff "$out/spin.ptx" gpu/cudaload/spin.ptx | head -20
  exit 1
fi
echo "gpu/cudaload/spin.ptx matches spin.cu"
