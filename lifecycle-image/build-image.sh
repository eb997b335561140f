#!/usr/bin/env bash
# Adds /cnb/lifecycle/preparer (and preparer.d beside it) to a lifecycle base image as one layer, without a Docker
# engine (umoci, skopeo).
#
#   lifecycle-image/build-image.sh BUILT OUT_LAYOUT [BASE]
#
# BUILT is build-executable.sh's OUT_DIR: BUILT/lifecycle holds what goes into /cnb/lifecycle, BUILT/version the
# version the image is labelled with.
# BASE is any skopeo source (docker://docker.io/buildpacksio/lifecycle:0.21.17, oci:DIR:TAG, ...); "local"
# (the default) builds a minimal stand-in base with the lifecycle's directories, so no network is needed.
# The result is the OCI layout OUT_LAYOUT, tagged "preparer"; `skopeo copy oci:OUT_LAYOUT:preparer docker://...`
# publishes it.
set -euo pipefail
built=$(realpath "${1:?usage: build-image.sh BUILT OUT_LAYOUT [BASE]}")
layout=$(realpath -m "${2:?usage: build-image.sh BUILT OUT_LAYOUT [BASE]}")
base=${3:-local}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rm -rf "$layout"
if [ "$base" = local ]; then
  umoci init --layout "$layout"
  umoci new --image "$layout:base"
  umoci config --image "$layout:base" --os linux --architecture amd64 --config.workingdir /layers \
    --config.env PATH=/cnb/lifecycle --config.user 1000:1000
  umoci unpack --image "$layout:base" "$work/base" >/dev/null
  # What a lifecycle image offers a phase: /cnb/lifecycle, a /tmp; nothing else (no shell, no libc).
  install -d -m 0755 "$work/base/rootfs/cnb/lifecycle"
  install -d -m 1777 "$work/base/rootfs/tmp"
  umoci repack --image "$layout:base" "$work/base"
else
  skopeo copy --quiet "$base" "oci:$layout:base"
fi

umoci unpack --image "$layout:base" "$work/bundle" >/dev/null
install -d -m 0755 "$work/bundle/rootfs/cnb/lifecycle"
rm -rf "$work/bundle/rootfs/cnb/lifecycle/preparer" "$work/bundle/rootfs/cnb/lifecycle/preparer.d"
cp -a "$built/lifecycle/preparer" "$built/lifecycle/preparer.d" "$work/bundle/rootfs/cnb/lifecycle/"
umoci repack --image "$layout:preparer" "$work/bundle"
umoci config --image "$layout:preparer" --config.label "io.buildpacks.preparer.version=$(cat "$built/version")"
umoci gc --layout "$layout"
echo "built $layout:preparer on $base"
