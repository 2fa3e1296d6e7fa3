#!/usr/bin/env bash
# The release wheel as a researcher meets it: installed into a fresh virtualenv whose PATH has no
# cargo and no rustc (only the virtualenv's and the system's folders), then
#   - the console command: `augscope --version` names the package's version;
#   - `augscope apply` through it on the bundled sample (rotation, scale, elastic, label map) gives
#     the same voxels, bit for bit, as the source build REFERENCE_BIN;
#   - `augscope view --help` (the wheel's binary carries the window) and `augscope info`;
#   - the Python tests, against the console command.
#
#   tests/wheel/fresh_venv.sh WHEEL REFERENCE_BIN
set -euo pipefail
WHEEL=$(realpath "$1")
REF=$(realpath "$2")
cd "$(dirname "$0")/../.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$WHEEL" "pytest==9.2.0"
export PATH="$WORK/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
hash -r
for tool in cargo rustc; do
  if command -v "$tool" > /dev/null; then
    echo "fresh_venv: $tool is on the fresh PATH ($(command -v "$tool"))" >&2
    exit 1
  fi
done
[[ $(command -v augscope) == "$WORK/venv/bin/augscope" ]]
want="augscope $(python -c 'import augscope; print(augscope.__version__)')"
got=$(augscope --version)
[[ $got == "$want" ]] || { echo "fresh_venv: '$got', expected '$want'" >&2; exit 1; }
echo "fresh_venv: $got, from $(python -c 'import augscope._cli as c; print(c.binary())')"
augscope view --help > /dev/null

args=(--rotate 0.2,-0.1,0.3 --scale 1.1 --elastic 800,12 --seed 7 --order 1
      --label assets/mni152_tissue_labels.nii.gz)
augscope apply assets/mni152_t1.nii.gz "$WORK/wheel.nii.gz" "${args[@]}" \
  --label-out "$WORK/wheel_label.nii.gz" > /dev/null
"$REF" apply assets/mni152_t1.nii.gz "$WORK/ref.nii.gz" "${args[@]}" \
  --label-out "$WORK/ref_label.nii.gz" > /dev/null
for f in "" _label; do
  cmp <(gzip -dc "$WORK/wheel$f.nii.gz") <(gzip -dc "$WORK/ref$f.nii.gz")
done
echo "fresh_venv: augscope apply through the console command equals the source build, bit for bit"
augscope info "$WORK/wheel.nii.gz" | head -2

AUGSCOPE="$WORK/venv/bin/augscope" python -m pytest -q -p no:cacheprovider python/tests
