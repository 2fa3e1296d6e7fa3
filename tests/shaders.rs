//! Every WGSL shader in `shaders/` parses and validates with naga, so a broken shader fails CI
//! instead of the first frame of the app.

use std::path::Path;

#[test]
fn every_shader_parses_and_validates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("shaders/ exists") {
        let path = entry.expect("readable entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("wgsl") {
            continue;
        }
        let src = std::fs::read_to_string(&path).expect("readable shader");
        let module = naga::front::wgsl::parse_str(&src)
            .unwrap_or_else(|e| panic!("{}: {}", path.display(), e.emit_to_string(&src)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{}: {e:?}", path.display()));
        for ep in ["vs_main", "fs_main"] {
            assert!(
                module.entry_points.iter().any(|e| e.name == ep),
                "{}: no entry point {ep}",
                path.display()
            );
        }
        n += 1;
    }
    assert!(n >= 1, "no shader found in {}", dir.display());
}
