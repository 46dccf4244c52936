#!/usr/bin/env bash
# Builds the container image the chart and the injector run
# (deploy/image/Containerfile): the three release binaries of
# scripts/build.sh, stamped with the chart's appVersion, on a glibc base.
#
#   scripts/image.sh [-t IMAGE]... [--base IMAGE | --base-from-host] [--print-name]
#
#   -t IMAGE          name the image (repeatable); default
#                     ghcr.io/inferwatch/inferwatch:<appVersion>, the chart's
#                     image.repository at its appVersion, and :latest, the
#                     image `inferwatch inject` gives sidecars without --image
#   --base IMAGE      the base image (default gcr.io/distroless/base-debian12:nonroot)
#   --base-from-host  no registry reachable (CI, air-gapped builders): build
#                     localhost/inferwatch-base:host, distroless/base's
#                     contents that inferwatch uses (the dynamic loader and
#                     libc the binaries link, CA certificates, nsswitch.conf,
#                     passwd/group with nonroot 65532, /tmp) taken from this
#                     machine, and build on it
#   --print-name      print the default image name and exit
#
# CONTAINER_TOOL picks the builder (default: podman, else docker).
# deploy/image's test builds the image this way and runs it with the
# injector's and the chart's container specs (docs/kubernetes.md).
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' deploy/helm/inferwatch/Chart.yaml)
repository=$(sed -n '/^image:/,/^[^ ]/s/^ *repository: *//p' deploy/helm/inferwatch/values.yaml | head -1)
[ -n "$version" ] && [ -n "$repository" ] || { echo "image.sh: no appVersion in Chart.yaml or image.repository in values.yaml" >&2; exit 1; }

names=()
base=gcr.io/distroless/base-debian12:nonroot
from_host=false
while [ $# -gt 0 ]; do
  case "$1" in
    -t) names+=("$2"); shift 2 ;;
    --base) base=$2; shift 2 ;;
    --base-from-host) from_host=true; shift ;;
    --print-name) echo "$repository:$version"; exit 0 ;;
    *) echo "image.sh: unknown argument $1 (see the script's header)" >&2; exit 2 ;;
  esac
done
[ ${#names[@]} -gt 0 ] || names=("$repository:$version" "$repository:latest")

tool=${CONTAINER_TOOL:-}
if [ -z "$tool" ]; then
  if command -v podman >/dev/null; then tool=podman; elif command -v docker >/dev/null; then tool=docker; else
    echo "image.sh: neither podman nor docker is installed (or set CONTAINER_TOOL)" >&2; exit 1
  fi
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
INFERWATCH_VERSION=$version scripts/build.sh "$ctx/bin" ./cmd/inferwatch ./cmd/inferwatch-extproc ./cmd/inferwatch-inject

if $from_host; then
  root=$ctx/base
  mkdir -p "$root/etc/ssl/certs" "$root/tmp" "$root/home/nonroot"
  chmod 1777 "$root/tmp"
  # What the binaries load: their interpreter and libraries, by the paths
  # ldd prints (the loader looks for exactly those).
  for lib in $(for b in "$ctx"/bin/*; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
  [ ! -f /etc/ssl/certs/ca-certificates.crt ] || cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
  printf 'hosts: files dns\n' > "$root/etc/nsswitch.conf"
  printf 'FROM scratch\nCOPY . /\n' > "$ctx/base.Containerfile"
  base=localhost/inferwatch-base:host
  "$tool" build -q -f "$ctx/base.Containerfile" -t "$base" "$root" >/dev/null
fi

revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[ "$revision" = unknown ] || [ -z "$(git status --porcelain 2>/dev/null)" ] || revision=$revision-dirty
tags=()
for n in "${names[@]}"; do tags+=(-t "$n"); done
"$tool" build -q -f deploy/image/Containerfile \
  --build-arg "BASE=$base" --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
  "${tags[@]}" "$ctx/bin" >/dev/null
echo "built ${names[*]} (inferwatch $version, revision $revision, base $base)"
