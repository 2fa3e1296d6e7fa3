#!/usr/bin/env bash
# On the GPU machine: the explorer's tour of the CUDA engine (examples/gpu_tour.rs, rendered by wgpu
# on the machine's GPU through Vulkan, no display): screenshots of the GPU memory panel, a slider
# step with elastic on and "Compare CPU vs GPU", with the figures in tour.txt. The Vulkan loader
# comes as .debs in .gl (see the device notes); the example's binary in .gpu/examples
# (`cargo build --release --example gpu_tour`, copied there).
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
TOUR=.gpu/examples/gpu_tour
run() { AUGSCOPE_TOUR_DIR="$OUT" timeout "$1" "$TOUR" >>"$OUT/tour.log" 2>&1; }
if ! run 400; then
  # No Vulkan driver found where the loader looks: name NVIDIA's.
  echo "retry with NVIDIA's Vulkan ICD named" >>"$OUT/tour.log"
  # NVIDIA_ROOT: where the machine mounts the driver's files (/usr/local/nvidia by default).
  NV=${NVIDIA_ROOT:-/usr/local/nvidia}
  export VK_DRIVER_FILES=$NV/share/vulkan/icd.d/nvidia_icd.json
  export __EGL_VENDOR_LIBRARY_FILENAMES=$NV/share/glvnd/egl_vendor.d/10_nvidia.json
  run 300
fi
