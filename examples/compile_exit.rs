//! A process that starts compiling kernels on other threads and then ends at once, as a command
//! does when its work fell back to the CPU engine before the compiles it started were needed.
//! `tests/background_compile.rs` runs it: the process must exit cleanly, never crash in NVRTC's
//! teardown. With `--no-wait` it skips the wait that every front end does before it returns
//! (`--after-ms=N`: it ends N ms after starting the compiles).

fn main() {
    use augscope::gpu::nvrtc::{Family, compile_ahead, finish_background_compiles};
    let wait = !std::env::args().any(|a| a == "--no-wait");
    for sigma in [2.0, 3.0] {
        let defines = augscope::engine::cuda::field_defines(sigma);
        compile_ahead(Family::Field, defines, Some("sm_90"));
    }
    compile_ahead(Family::Filter, vec![], Some("sm_90"));
    if wait {
        finish_background_compiles();
    } else if let Some(ms) =
        std::env::args().find_map(|a| a.strip_prefix("--after-ms=")?.parse().ok())
    {
        // Ends while the compiles are under way, as a quick CPU retry does.
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}
