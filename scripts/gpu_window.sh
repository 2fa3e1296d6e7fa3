#!/usr/bin/env bash
# On the GPU machine: the real augscope window under Xvfb with the CUDA engine selected, drawn by
# Mesa's lavapipe (software Vulkan: NVIDIA's Vulkan does not present to Xvfb), on the MNI sample
# resampled to 256×512×512. The X server, its libraries and lavapipe are Debian packages unpacked
# into /opt/x (never over the system's own); the GUI binary comes in .x2/augscope. Each run takes
# its own PNG of the window (AUGSCOPE_SHOT png=…) and quits. Results go to $OUT.
#
# Filled here, on Debian 12 (two folders, carried in two calls back to back: one call may carry
# 64 MiB, and a warm machine keeps /opt/x between calls):
#   .x1: apt-get download libllvm15 libz3-4 mesa-vulkan-drivers
#   .x2: apt-get download xvfb xserver-common x11-xkb-utils xkb-data x11-common libxfont2
#        libfontenc1 libpixman-1-0 libxkbfile1 libunwind8 libxau6 libxdmcp6 libxaw7 libxt6 libxmu6
#        libxpm4 libsm6 libice6 libx11-6 libx11-data libx11-xcb1 libxcb1 libxext6 libxrender1
#        libxfixes3 libxrandr2 libxi6 libxcursor1 libxkbcommon0 libxkbcommon-x11-0 libxcb-xkb1
#        libxcb-dri3-0 libxcb-present0 libxcb-randr0 libxcb-shm0 libxcb-sync1 libxcb-xfixes0
#        libxshmfence1 libwayland-client0 libdrm2 libdrm-amdgpu1 libdrm-common libelf1 libedit2
#        libfreetype6 libbz2-1.0 libpng16-16 libbrotli1
#        plus the stripped GUI binary as .x2/augscope and the headless one as .x2/augscope-headless;
#   .gl: the Vulkan loader (see the device notes).
# First call: for f in .x1/*.deb; do dpkg -x $f /opt/x; done (carry .x1); second: this script
# (carry .x2 and .gl).
set -u
OUT=${OUT:-gpu_out}
X=/opt/x
mkdir -p "$OUT" "$X"
# The packages may come in two calls (the carry limit): .x1 (lavapipe and LLVM) first.
for f in .x1/*.deb .x2/*.deb; do [ -e "$f" ] && dpkg -x "$f" "$X"; done
[ -e "$X/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1" ] || echo "lavapipe's LLVM is missing" >>"$OUT/window.log"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
L=$X/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$L:${LD_LIBRARY_PATH:-}
# Xvfb runs xkbcomp from /usr/bin.
[ -e /usr/bin/xkbcomp ] || ln -s "$X/usr/bin/xkbcomp" /usr/bin/xkbcomp
sed "s#/usr/lib/x86_64-linux-gnu#$L#" "$X/usr/share/vulkan/icd.d/lvp_icd.x86_64.json" >"$X/lvp.json"
export VK_DRIVER_FILES=$X/lvp.json
# libxkbcommon reads its keymaps from the unpacked xkb-data.
export XKB_CONFIG_ROOT=$X/usr/share/X11/xkb
"$X/usr/bin/Xvfb" :7 -screen 0 1920x1080x24 -xkbdir "$X/usr/share/X11/xkb" -nolisten tcp \
  >"$OUT/xvfb.log" 2>&1 &
XPID=$!
sleep 2
export DISPLAY=:7 XDG_RUNTIME_DIR=/tmp/xdg
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
# The sample at 256×512×512 (trilinear, torch), as .npy.
W=$(mktemp -d)
.x2/augscope-headless apply assets/mni152_t1.nii.gz "$W/mni.npy" >/dev/null 2>&1 ||
  cp assets/mni152_t1.nii.gz "$W/mni.nii.gz"
python3 - "$W" <<'PY'
import sys, numpy as np, torch
w = sys.argv[1]
a = torch.from_numpy(np.load(f"{w}/mni.npy").astype(np.float32))[None, None]
b = torch.nn.functional.interpolate(a, size=(256, 512, 512), mode="trilinear", align_corners=True)
np.save(f"{w}/mni_256x512x512.npy", b[0, 0].numpy())
PY
shot() { # name spec
  export XDG_DATA_HOME=$(mktemp -d) XDG_CONFIG_HOME=$(mktemp -d)
  local t0=$SECONDS
  AUGSCOPE_SHOT="backend=cuda;$2;png=$OUT/$1.png" timeout 240 .x2/augscope view \
    "$W/mni_256x512x512.npy" >>"$OUT/window.log" 2>&1
  echo "$1: rc=$? in $((SECONDS - t0)) s" >>"$OUT/window.log"
}
shot window_elastic "rotate=12,0,0;elastic=900,12;nudge"
shot window_compare "rotate=12,0,0;elastic=900,12;compare"
kill $XPID 2>/dev/null
rm -rf "$W"
