#!/usr/bin/env bash
# Save built images as OCI archives for containerd, one per image ID:
#
#   hack/images/export.sh [IMAGE...]     (default: the images `make images` builds that exist)
#
# An archive is ~/.cache/rolloutfleet/images/oci/<name>_<tag>.<image id>.oci.tar; it is
# written only when missing (same ID, same archive), and older archives of the same
# name:tag are removed. Prints one path per image. The archive names the image (its
# org.opencontainers.image.ref.name), so on a node:
#
#   ctr -n k8s.io images import <archive>
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/images/lib.sh
source "$here/lib.sh"
cd "$images_root"
engine="$(images_engine)"
out="$images_cache/oci"
mkdir -p "$out"

images=("$@")
if ((${#images[@]} == 0)); then
  version="$(images_version)"
  for tag in worker:"$version"-slim worker:"$version" worker:"$version"-cpu operator:"$version" redis:"$version"; do
    image_id "ghcr.io/rolloutfleet/$tag" >/dev/null && images+=("ghcr.io/rolloutfleet/$tag")
  done
  ((${#images[@]})) || { say "export failed: no image built yet (make images)" >&2; exit 1; }
fi

for image in "${images[@]}"; do
  id="$(image_id "$image")" || { say "export failed: no image $image" >&2; exit 1; }
  stem="$(tr '/:' '-_' <<<"$image")" # ghcr.io-rolloutfleet-worker_0.1.0
  archive="$out/$stem.${id:0:16}.oci.tar"
  if [[ -s "$archive" ]]; then
    say "$image: $archive (exists)" >&2
  else
    if [[ "$engine" == podman ]]; then
      step "export-$stem" 1800 podman save --format oci-archive -o "$archive.part" "$image"
    else
      # Docker >= 25 writes an OCI layout (containerd imports either format).
      step "export-$stem" 1800 docker save -o "$archive.part" "$image"
    fi
    mv "$archive.part" "$archive"
    say "$image: saved in ${step_seconds}s, $(du -h "$archive" | cut -f1)" >&2
  fi
  for old in "$out/$stem".*.oci.tar; do
    [[ "$old" != "$archive" && "${old#"$out/$stem".}" =~ ^[0-9a-f]{16}\.oci\.tar$ ]] || continue
    rm -f "$old"
    say "removed $old (an older build of $image)" >&2
  done
  printf '%s\n' "$archive"
done
