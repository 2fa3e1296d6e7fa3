//! The layering rule of docs/ARCHITECTURE.md, checked on the source: a folder of `src/` imports
//! only the folders of the layers below it (core; io, augment, gpu; engine; filter; export; app;
//! bench; cli), no two files import each other round a cycle, only `app` names egui, `unsafe`
//! appears only where a module allows it, and no module glob-imports another of this crate.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layer of each folder of `src/`, bottom up. Folders of one layer do not import each other.
const LAYERS: &[(&str, u32)] = &[
    ("core", 0),
    ("io", 1),
    ("augment", 1),
    ("gpu", 1),
    ("engine", 2),
    ("filter", 3),
    ("export", 4),
    ("app", 5),
    ("bench", 6),
    ("cli", 7),
];

fn layer(name: &str) -> Option<u32> {
    LAYERS.iter().find(|(n, _)| *n == name).map(|(_, l)| *l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src is readable") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without `//` comments (doc comments cite other layers freely).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            // A `//` inside a string literal ("http://…") is rare in this crate; keep lines whose
            // `//` follows a quote.
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules named after `crate::` in `text`, grouped imports included.
fn crate_refs(text: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut refs = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let body = &group[..group.find('}').unwrap_or(group.len())];
            let mut depth = 0;
            let mut start = 0;
            for (j, c) in body.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        refs.insert(ident(body[start..j].trim()));
                        start = j + 1;
                    }
                    _ => {}
                }
            }
            refs.insert(ident(body[start..].trim()));
        } else {
            refs.insert(ident(rest));
        }
    }
    refs
}

fn src_files() -> Vec<(String, PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let rel = p.strip_prefix(&root).expect("below src");
            let top = rel.components().next()?.as_os_str().to_str()?.to_string();
            // Files at the root (lib.rs, main.rs) wire the layers together.
            (rel.components().count() > 1).then(|| {
                let text = std::fs::read_to_string(&p).expect("a source file");
                (top, p, text)
            })
        })
        .collect()
}

#[test]
fn every_folder_is_a_known_layer() {
    for (top, path, _) in src_files() {
        assert!(
            layer(&top).is_some(),
            "{} is in src/{top}, which has no layer in docs/ARCHITECTURE.md",
            path.display()
        );
    }
}

#[test]
fn layers_import_only_the_layers_below() {
    let mut bad = vec![];
    for (top, path, text) in src_files() {
        let Some(mine) = layer(&top) else { continue };
        for r in crate_refs(&code(&text)) {
            if r == top {
                continue;
            }
            if let Some(theirs) = layer(&r)
                && theirs >= mine
            {
                bad.push(format!("{} (src/{top}) imports crate::{r}", path.display()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "imports against the layering:\n{}",
        bad.join("\n")
    );
}

#[test]
fn only_the_app_names_egui() {
    for (top, path, text) in src_files() {
        if top == "app" {
            continue;
        }
        let c = code(&text);
        for lib in ["egui", "eframe", "wgpu"] {
            assert!(
                !c.contains(&format!("{lib}::")),
                "{} (src/{top}) names {lib}",
                path.display()
            );
        }
    }
}

#[test]
fn the_core_imports_nothing_of_the_crate() {
    for (top, path, text) in src_files() {
        if top != "core" {
            continue;
        }
        let refs = crate_refs(&code(&text));
        assert!(
            refs.iter().all(|r| r == "core"),
            "{} imports {refs:?}",
            path.display()
        );
    }
}

#[test]
fn unsafe_code_is_allowed_only_where_the_architecture_says() {
    // The CUDA runtime, the engine's and the filters' kernel launches, the SIMD noise, the
    // AVX-512 order-1 sampler and row coordinates, the huge-page advice on the engine's large buffers and the
    // window's library probe.
    let allowed = [
        "gpu/mod.rs",
        "engine/cuda/mod.rs",
        "filter/cuda/mod.rs",
        "engine/noise.rs",
        "engine/cpu/sampler.rs",
        "engine/hugepages.rs",
        "app/preflight.rs",
    ];
    for (_, path, text) in src_files() {
        if text.contains("allow(unsafe_code)") {
            let p = path.to_string_lossy().replace('\\', "/");
            assert!(
                allowed.iter().any(|a| p.ends_with(a)),
                "{p} allows unsafe code"
            );
        }
    }
}

#[test]
fn the_scanner_sees_grouped_and_plain_imports() {
    let refs =
        crate_refs("use crate::{core::Plan, engine::{Job, Outputs}};\nlet x = crate::io::load;");
    assert_eq!(
        refs.into_iter().collect::<Vec<_>>(),
        vec!["core".to_string(), "engine".into(), "io".into()]
    );
    assert_eq!(code("a // crate::app\nb"), "a \nb");
}

/// The module path of a file below `src/` (`engine/cuda/mod.rs` → `engine/cuda`).
fn module_of(rel: &str) -> String {
    let m = rel.trim_end_matches(".rs");
    m.strip_suffix("/mod").unwrap_or(m).to_string()
}

/// The modules a file's code names: `crate::a::b…` paths and `super::x` siblings, each resolved to
/// the longest module path that exists.
fn module_refs(module: &str, text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let ident_path = |s: &str| -> Vec<String> {
        s.split("::")
            .map(|p| {
                p.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .take_while(|p| !p.is_empty())
            .collect()
    };
    let longest = |parts: Vec<String>| -> Option<String> {
        (1..=parts.len())
            .rev()
            .map(|n| parts[..n].join("/"))
            .find(|k| modules.contains(k))
    };
    let mut refs = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        if let Some(m) = longest(ident_path(&text[i + "crate::".len()..])) {
            refs.insert(m);
        }
    }
    let parent = module.rsplit_once('/').map_or("", |p| p.0);
    for (i, _) in text.match_indices("super::") {
        let name = ident_path(&text[i + "super::".len()..]);
        if let Some(first) = name.first() {
            let k = if parent.is_empty() {
                first.clone()
            } else {
                format!("{parent}/{first}")
            };
            if modules.contains(&k) {
                refs.insert(k);
            }
        }
    }
    refs.remove(module);
    refs
}

#[test]
fn no_two_files_import_each_other_round_a_cycle() {
    // A module and its own parent or children are one unit (a folder's `mod.rs` declares the
    // files below it, and they use its items); every other import must form no cycle.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files: Vec<(String, String)> = src_files()
        .into_iter()
        .map(|(_, p, text)| {
            let rel = p.strip_prefix(&root).expect("below src");
            (
                module_of(&rel.to_string_lossy().replace('\\', "/")),
                code(&text),
            )
        })
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|f| f.0.clone()).collect();
    let related =
        |a: &str, b: &str| a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"));
    let edges: Vec<(String, BTreeSet<String>)> = files
        .iter()
        .map(|(m, text)| {
            let refs = module_refs(m, text, &modules)
                .into_iter()
                .filter(|r| !related(m, r))
                .collect();
            (m.clone(), refs)
        })
        .collect();
    let next = |m: &str| -> BTreeSet<String> {
        edges
            .iter()
            .find(|e| e.0 == m)
            .map(|e| e.1.clone())
            .unwrap_or_default()
    };
    // A depth-first walk from every module; reaching a module on the current path is a cycle.
    fn walk(
        m: &str,
        next: &dyn Fn(&str) -> BTreeSet<String>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if let Some(i) = path.iter().position(|p| p == m) {
            panic!("import cycle: {} → {m}", path[i..].join(" → "));
        }
        if done.contains(m) {
            return;
        }
        path.push(m.to_string());
        for n in next(m) {
            walk(&n, next, path, done);
        }
        path.pop();
        done.insert(m.to_string());
    }
    let mut done = BTreeSet::new();
    for (m, _) in &edges {
        walk(m, &next, &mut vec![], &mut done);
    }
    // The scanner sees the imports it must: the engine's CUDA host path names the GPU runtime.
    assert!(next("engine/cuda").contains("gpu/buffer"));
}

/// `use super::*`, `use crate::…::*`, `use self::…::*` or `use child::*` (a module the file
/// declares) outside a test module hides what a file takes from where: each import is named.
/// A `pub use …::*` re-export (a module's facade) is allowed.
#[test]
fn no_module_glob_imports_another_of_this_crate() {
    let mut bad = vec![];
    for (_, path, text) in src_files() {
        // A test module in a file of its own (`mod tests;`) takes its parent's items, as an
        // inline one does.
        if path.file_name().is_some_and(|f| f == "tests.rs") {
            continue;
        }
        let code = code(&text);
        let children: Vec<String> = code
            .lines()
            .filter_map(|l| {
                let l = l.trim_start();
                let l = l.strip_prefix("pub ").unwrap_or(l);
                let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
                l.strip_prefix("mod ")?
                    .strip_suffix(';')
                    .map(str::to_string)
            })
            .collect();
        for (n, line) in code.lines().enumerate() {
            // Test modules are indented; a file's own imports start the line.
            let Some(used) = line.strip_prefix("use ") else {
                continue;
            };
            let Some(module) = used.trim_end().strip_suffix("::*;") else {
                continue;
            };
            let first = module.split("::").next().unwrap_or("");
            if ["super", "crate", "self"].contains(&first) || children.iter().any(|c| c == first) {
                bad.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "glob imports of this crate's modules (name what is imported):\n{}",
        bad.join("\n")
    );
}
