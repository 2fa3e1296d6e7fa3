//! Builds a store of prebuilt kernels (`augscope::gpu::prebuilt`): every module of a manifest,
//! compiled by NVRTC to CUBIN for each architecture, in the kernel cache's format. No GPU is
//! needed, only NVRTC (`pip install nvidia-cuda-nvrtc`, its lib folder on LD_LIBRARY_PATH).
//!
//! A manifest is what a workload compiled, recorded on a GPU host with
//! `AUGSCOPE_KERNEL_RECORD=FILE` (one JSON line per module).
//!
//! `cargo run --release --no-default-features --example prebuild_kernels -- MANIFEST OUT_DIR
//! [ARCH,ARCH,...]` (default: sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120).

use augscope::gpu::prebuilt;

const ARCHS: &str = "sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !(2..=3).contains(&args.len()) {
        eprintln!("usage: prebuild_kernels MANIFEST OUT_DIR [ARCH,ARCH,...]");
        std::process::exit(2);
    }
    let fail = |msg: String| -> ! {
        eprintln!("prebuild_kernels: {msg}");
        std::process::exit(2)
    };
    let text =
        std::fs::read_to_string(&args[0]).unwrap_or_else(|e| fail(format!("{}: {e}", args[0])));
    let manifest = prebuilt::read_manifest(&text).unwrap_or_else(|e| fail(e));
    let archs: Vec<String> = args
        .get(2)
        .map_or(ARCHS, String::as_str)
        .split(',')
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect();
    let dir = std::path::Path::new(&args[1]);
    let t = std::time::Instant::now();
    let index = augscope::gpu::nvrtc::build_prebuilt(&manifest, &archs, dir)
        .unwrap_or_else(|e| fail(e.to_string()));
    let (n, bytes) = augscope::gpu::kernel_cache::usage(dir);
    println!(
        "{} modules x {} architectures ({}), NVRTC {}.{}: {n} entries, {:.1} MB, in {:.0} s",
        index.modules,
        index.archs.len(),
        index.archs.join(", "),
        index.nvrtc.0,
        index.nvrtc.1,
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
}
