//! In-process fuzz worker of augscope's input contract, on stable Rust.
//!
//! Every loader (NIfTI, NIfTI .gz, .npy, PNG, TIFF, JPEG, a DICOM file and a DICOM folder), the
//! preset parser (with sampling and a CPU apply of what it draws), `preset import` and the export
//! of parsed presets to every target get seeded mutants of the committed seed corpus, called
//! through the library in this process, thousands per second. Three targets make hostile cases
//! of their own ([`hostile`]): presets with ranges on and past the plan limits, voxel sizes no
//! scan has in mm space, and parameter dicts with bad orders, axes and values. A panic is caught and reported; an
//! abort, a stack overflow or an allocation past the memory limit ends the process, and the
//! supervisor (`tests/fuzz/fuzz.py --in-process`) records the mutant and starts a new worker
//! after it. Run it through the supervisor, which sets the memory limit and reads the progress:
//!
//! ```text
//! cargo build --release --no-default-features --example fuzz
//! python3 tests/fuzz/fuzz.py --in-process target/release/examples/fuzz --execs 100000
//! ```
//!
//! Worker protocol: `fuzz <target> <seed> <from> <to> <work dir> <snippet dir>`. Before each
//! mutant the worker writes it under `<work dir>/case/` and prints its index on stdout; a
//! contract break prints `BREAK <index> <what>`. Exported snippets that succeeded go to
//! `<snippet dir>` (one per distinct text, at most 400), where the supervisor parses them as
//! Python. The last line is `DONE <executions> <slowest ms>`.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::Instant;

use augscope::augment::preset::Preset;
use augscope::engine::apply_new;
use augscope::engine::cpu::CpuBackend;
use augscope::export::interop::{Target, export};
use augscope::io::{LoadOptions, load};

const INTERESTING: [u64; 11] = [
    0,
    1,
    0x7F,
    0x80,
    0xFF,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFF,
];
const NUMBERS: [&str; 12] = [
    "0",
    "-1",
    "1e308",
    "-1e308",
    "1e19",
    "nan",
    "inf",
    "-0.0",
    "18446744073709551615",
    "255",
    "1e-300",
    "3",
];
const INSERTS: [&str; 13] = [
    "\"", "'", "\\n", "\n", "\"\"\"", "\\", "[", "]", "{", "=", "\0", "é", "\u{d7ff}",
];
/// A mutant slower than this is reported (the contract: an answer in bounded time).
const SLOW_MS: f64 = 10_000.0;
/// Volumes up to this many voxels also go through a CPU apply after loading.
const APPLY_MAX_VOXELS: usize = 1 << 16;
const MAX_SNIPPETS: usize = 400;

/// xorshift64*: the mutants depend on (seed, index) alone.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(1)
            .max(1))
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, s: &'a [T]) -> &'a T {
        &s[self.below(s.len())]
    }
}

fn mutate_bytes(rng: &mut Rng, data: &[u8]) -> Vec<u8> {
    let mut b = data.to_vec();
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            b.push(0);
        }
        let i = rng.below(b.len());
        match rng.below(7) {
            0 => b[i] ^= 1 << rng.below(8),
            1 => {
                let v = *rng.pick(&INTERESTING);
                let width = *rng.pick(&[1usize, 2, 4]);
                let bytes = if rng.below(2) == 0 {
                    v.to_le_bytes()[..width].to_vec()
                } else {
                    v.to_be_bytes()[8 - width..].to_vec()
                };
                let end = (i + width).min(b.len());
                b.splice(i..end, bytes);
            }
            2 => {
                let end = (i + 1 + rng.below(64)).min(b.len());
                b.drain(i..end);
            }
            3 => {
                let j = rng.below(b.len());
                let end = (j + 1 + rng.below(64)).min(b.len());
                let chunk = b[j..end].to_vec();
                b.splice(i..i, chunk);
            }
            4 => b.truncate(i),
            5 => b[i] = rng.below(256) as u8,
            _ => {
                let n = 1 + rng.below(16);
                let chunk: Vec<u8> = (0..n).map(|_| rng.below(256) as u8).collect();
                b.splice(i..i, chunk);
            }
        }
    }
    b
}

fn mutate_text(rng: &mut Rng, text: &str) -> String {
    let mut lines: Vec<String> = text.split('\n').map(String::from).collect();
    for _ in 0..1 + rng.below(3) {
        let i = rng.below(lines.len());
        let line = lines[i].clone();
        match rng.below(6) {
            0 => {
                let digits: Vec<usize> = line
                    .char_indices()
                    .filter(|(_, c)| c.is_ascii_digit())
                    .map(|(k, _)| k)
                    .collect();
                if !digits.is_empty() {
                    let k = *rng.pick(&digits);
                    let j = line[k..]
                        .find(|c: char| !(c.is_ascii_digit() || ".e-+".contains(c)))
                        .map_or(line.len(), |n| k + n);
                    lines[i] = format!("{}{}{}", &line[..k], rng.pick(&NUMBERS), &line[j..]);
                }
            }
            1 => {
                lines.remove(i);
                if lines.is_empty() {
                    lines.push(String::new());
                }
            }
            2 => {
                let j = rng.below(lines.len());
                let copy = lines[j].clone();
                lines.insert(i, copy);
            }
            3 => {
                let k = char_boundary(&line, rng.below(line.len() + 1));
                lines[i] = format!("{}{}{}", &line[..k], rng.pick(&INSERTS), &line[k..]);
            }
            4 => {
                let k = char_boundary(&line, rng.below(line.len() + 1));
                lines[i] = line[..k].to_string();
            }
            _ => {
                let b = mutate_bytes(rng, line.as_bytes());
                lines[i] = String::from_utf8_lossy(&b).into_owned();
            }
        }
    }
    lines.join("\n")
}

fn char_boundary(s: &str, mut k: usize) -> usize {
    while !s.is_char_boundary(k) {
        k -= 1;
    }
    k
}

/// The seed corpus: (kind, file name, bytes), from the committed test data and presets.
fn corpus(root: &Path) -> Vec<(String, String, Vec<u8>)> {
    let mut out = vec![];
    let io = root.join("tests/data/io");
    let mut names: Vec<_> = std::fs::read_dir(&io)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    names.sort();
    for name in names {
        let name = name.to_string_lossy().into_owned();
        let kind = match Path::new(&name).extension().and_then(|e| e.to_str()) {
            Some("nii") => "nifti",
            Some("gz") => "nifti_gz",
            Some("npy") => "npy",
            Some("png") => "png",
            Some("tif") => "tiff",
            _ => continue,
        };
        if let Ok(b) = std::fs::read(io.join(&name)) {
            out.push((kind.to_string(), name, b));
        }
    }
    for (kind, rel) in [
        ("nifti", "tests/fuzz/seeds/nifti2.nii"),
        ("dicom", "tests/data/dicom/MR_small.dcm"),
        ("dicom", "tests/data/dicom/CT_small.dcm"),
        ("jpeg", "tests/data/retina.jpg"),
        ("import", "tests/fuzz/seeds/report.json"),
        ("import", "tests/fuzz/seeds/nnunet_params.json"),
    ] {
        if let Ok(b) = std::fs::read(root.join(rel)) {
            out.push((kind.to_string(), rel.to_string(), b));
        }
    }
    let presets = root.join("assets/presets");
    let mut names: Vec<_> = std::fs::read_dir(&presets)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    for p in names {
        if let Ok(b) = std::fs::read(&p) {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            out.push(("preset".into(), name.clone().unwrap_or_default(), b.clone()));
            out.push(("export".into(), name.unwrap_or_default(), b));
        }
    }
    out
}

fn ext(target: &str) -> &'static str {
    match target {
        "nifti" => ".nii",
        "nifti_gz" => ".nii.gz",
        "npy" => ".npy",
        "png" => ".png",
        "tiff" => ".tif",
        "jpeg" => ".jpg",
        "dicom" => ".dcm",
        "import" => ".json",
        _ => ".toml",
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = vec![];
    let mut d = flate2::read::GzDecoder::new(data);
    match std::io::Read::read_to_end(&mut d, &mut out) {
        Ok(_) => out,
        Err(_) => data.to_vec(),
    }
}

/// What an error must look like: one line once the CLI joins its causes, no other control
/// characters, not empty.
fn check_message(msg: &str) -> Result<(), String> {
    if msg.trim().is_empty() {
        return Err("an empty error message".into());
    }
    if let Some(c) = msg.chars().find(|&c| c.is_control() && c != '\n') {
        return Err(format!("a control character {c:?} in the error: {msg:?}"));
    }
    Ok(())
}

/// Loads `path`; a small volume that loaded is also rotated on the CPU engine.
fn check_load(path: &Path) -> Result<(), String> {
    match load(path, &LoadOptions::default()) {
        Err(e) => check_message(&e.to_string()),
        Ok(v) => {
            let n: usize = v.shape.iter().product();
            if v.data.len() != n * v.channels {
                return Err(format!(
                    "loaded {} values for shape {:?} with {} channels",
                    v.data.len(),
                    v.shape,
                    v.channels
                ));
            }
            if n <= APPLY_MAX_VOXELS && (2..=3).contains(&v.ndim()) {
                let plan = augscope::Plan {
                    rotate_rad: if v.ndim() == 2 {
                        vec![0.2]
                    } else {
                        vec![0.2, 0.1, 0.3]
                    },
                    ..Default::default()
                };
                if let Err(e) = apply_new(&CpuBackend::new(), &plan, &v, None) {
                    check_message(&e.to_string())?;
                }
            }
            Ok(())
        }
    }
}

struct Worker {
    snippets: PathBuf,
    seen: HashSet<u64>,
}

impl Worker {
    fn keep_snippet(&mut self, target: Target, text: &str) {
        if matches!(target, Target::BatchgeneratorsJson | Target::MonaiBundle) {
            if serde_json::from_str::<serde_json::Value>(text).is_err() {
                // Reported by the caller through the snippet check below.
                let _ = std::fs::write(self.snippets.join("bad.json"), text);
            }
            return;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut h);
        let key = h.finish();
        if self.seen.len() < MAX_SNIPPETS && self.seen.insert(key) {
            let _ = std::fs::write(self.snippets.join(format!("{key:016x}.py")), text);
        }
    }

    fn preset(&mut self, text: &str, rng: &mut Rng, export_it: bool) -> Result<(), String> {
        let p = match Preset::parse(text) {
            Ok(p) => p,
            Err(e) => return check_message(&e.to_string()),
        };
        if export_it {
            for target in [
                Target::Monai,
                Target::TorchIo,
                Target::Batchgenerators,
                Target::BatchgeneratorsJson,
                Target::Nnunet,
                Target::MonaiBundle,
                Target::Python,
            ] {
                for ndim in [2, 3] {
                    match export(&p, target, ndim) {
                        Ok(s) => self.keep_snippet(target, &s),
                        Err(e) => check_message(&e.to_string())?,
                    }
                }
            }
            return Ok(());
        }
        let ndim = 2 + rng.below(2);
        let shape = if ndim == 2 {
            vec![9, 11]
        } else {
            vec![5, 7, 6]
        };
        let n: usize = shape.iter().product();
        let mut vol = augscope::Volume::new((0..n).map(|i| (i % 13) as f32).collect(), shape, 1);
        vol.spacing_mm = [1.0, 1.5, 2.0][..ndim].to_vec();
        for k in 0..2u64 {
            match p.sample(
                rng.next().wrapping_add(k),
                ndim,
                vol.channels,
                &vol.spacing_mm,
            ) {
                Err(e) => check_message(&e.to_string())?,
                Ok(s) => {
                    if let Err(e) = apply_new(&CpuBackend::new(), &s.plan, &vol, None) {
                        check_message(&e.to_string())?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes mutant `index` of `target` under `case` and runs it. Err: the contract broke.
    fn run(
        &mut self,
        target: &str,
        corpus: &[(String, String, Vec<u8>)],
        rng: &mut Rng,
        case: &Path,
    ) -> Result<(), String> {
        if let Some(outcome) = hostile::run(target, rng, case) {
            return outcome;
        }
        let kind = if target == "dicom_folder" {
            "dicom"
        } else {
            target
        };
        let pool: Vec<&(String, String, Vec<u8>)> = corpus.iter().filter(|s| s.0 == kind).collect();
        if pool.is_empty() {
            return Err(format!("no seeds for {target}"));
        }
        let seed = &rng.pick(&pool).2;
        let _ = std::fs::remove_dir_all(case);
        std::fs::create_dir_all(case).map_err(|e| format!("work folder: {e}"))?;
        let text_kind = matches!(kind, "preset" | "export" | "import");
        let mutant = if text_kind {
            mutate_text(rng, &String::from_utf8_lossy(seed)).into_bytes()
        } else if target == "nifti_gz" {
            if rng.below(4) != 0 {
                gzip(&mutate_bytes(rng, &gunzip(seed)))
            } else {
                mutate_bytes(rng, seed)
            }
        } else {
            mutate_bytes(rng, seed)
        };
        let src = if target == "dicom_folder" {
            let dir = case.join("series");
            std::fs::create_dir_all(&dir).map_err(|e| format!("work folder: {e}"))?;
            for k in 0..3 {
                let data: &[u8] = if k == 1 { &mutant } else { seed };
                std::fs::write(dir.join(format!("s{k}.dcm")), data)
                    .map_err(|e| format!("work file: {e}"))?;
            }
            dir
        } else {
            let p = case.join(format!("in{}", ext(target)));
            std::fs::write(&p, &mutant).map_err(|e| format!("work file: {e}"))?;
            p
        };
        match target {
            "preset" => self.preset(&String::from_utf8_lossy(&mutant), rng, false),
            "export" => self.preset(&String::from_utf8_lossy(&mutant), rng, true),
            "import" => {
                let text = String::from_utf8_lossy(&mutant);
                match augscope::export::import::import(&text, "fuzz") {
                    Ok(p) => {
                        // What import makes must itself round-trip as a preset.
                        let again = Preset::parse(&p.to_toml())
                            .map_err(|e| format!("an imported preset does not parse: {e}"))?;
                        again
                            .validate()
                            .map_err(|e| format!("an imported preset is invalid: {e}"))
                    }
                    Err(e) => check_message(&e.to_string()),
                }
            }
            _ => check_load(&src),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 7 {
        eprintln!(
            "usage: fuzz <target> <seed> <from> <to> <work dir> <snippet dir> \
             (run it through tests/fuzz/fuzz.py --in-process)"
        );
        std::process::exit(2);
    }
    let target = args[1].as_str();
    let parse = |s: &str| s.parse::<u64>().unwrap_or(0);
    let (seed, from, to) = (parse(&args[2]), parse(&args[3]), parse(&args[4]));
    let work = PathBuf::from(&args[5]);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let corpus = corpus(&root);
    let mut w = Worker {
        snippets: PathBuf::from(&args[6]),
        seen: HashSet::new(),
    };
    // Panics are caught and reported per mutant; the default hook would print each one.
    std::panic::set_hook(Box::new(|_| {}));
    let case = work.join("case");
    let stdout = std::io::stdout();
    let mut slowest = 0f64;
    for index in from..to {
        let mut rng = Rng::new(
            seed.wrapping_mul(1_000_003)
                .wrapping_add(index)
                .wrapping_mul(31)
                .wrapping_add(target.len() as u64),
        );
        {
            let mut o = stdout.lock();
            let _ = writeln!(o, "{index}");
            let _ = o.flush();
        }
        let t = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| w.run(target, &corpus, &mut rng, &case)));
        let ms = t.elapsed().as_secs_f64() * 1e3;
        slowest = slowest.max(ms);
        let broke = match outcome {
            Ok(Ok(())) if ms <= SLOW_MS => None,
            Ok(Ok(())) => Some(format!("took {ms:.0} ms")),
            Ok(Err(what)) => Some(what),
            Err(p) => Some(format!(
                "panic: {}",
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
        };
        if let Some(what) = broke {
            let keep = work.join(format!("break-{index}"));
            let _ = std::fs::rename(&case, &keep);
            let mut o = stdout.lock();
            let _ = writeln!(o, "BREAK {index} {}", what.replace('\n', " "));
            let _ = o.flush();
        }
    }
    let mut o = stdout.lock();
    let _ = writeln!(o, "DONE {} {slowest:.1}", to.saturating_sub(from));
}

/// Hostile cases made from scratch rather than mutated: `hostile_preset` (ranges on and past the
/// plan limits: what parses, fits the grid and its spacing must sample, and every sample must
/// apply or say why), `tiny_spacing` (voxel sizes no scan has, in mm space: an error, never a
/// panic or an allocation past the limit) and `hostile_import` (orders and axes that must be
/// refused, never coerced).
mod hostile {
    use super::{Rng, check_message};
    use augscope::augment::preset::Preset;
    use augscope::augment::{Elastic, Plan, Space};
    use augscope::engine::apply_new;
    use augscope::engine::cpu::CpuBackend;
    use std::path::Path;

    const NUMBERS: [&str; 18] = [
        "1e6",
        "-1e6",
        "1000000.0001",
        "2e6",
        "-2e6",
        "1e-3",
        "0.0009999",
        "1e3",
        "1000.5",
        "1e7",
        "-1e7",
        "1.0000001e7",
        "1e300",
        "-1.7e308",
        "1.7e308",
        "5e-324",
        "0.5",
        "3.0",
    ];
    const SPACINGS: [f64; 16] = [
        1e-30,
        1e-12,
        1e-6,
        1e-4,
        9.9e-4,
        1e-3,
        0.5,
        1.0,
        3.0,
        1e4,
        1.1e4,
        1e30,
        f64::NAN,
        f64::INFINITY,
        0.0,
        -1.0,
    ];
    /// Order values of a parameter dict: only 0, 1 and 3 (and 0 to 5 for labels) are orders.
    const ORDERS: [&str; 14] = [
        "-1", "3.9", "0.5", "2", "4", "6", "1e30", "true", "\"3\"", "[3]", "null", "0", "1", "3",
    ];

    /// The outcome of a hostile target, or `None` for the other targets.
    pub(super) fn run(target: &str, rng: &mut Rng, case: &Path) -> Option<Result<(), String>> {
        let text = match target {
            "hostile_preset" => preset_text(rng),
            "tiny_spacing" => return Some(tiny_spacing(rng)),
            "hostile_import" => import_text(rng),
            _ => return None,
        };
        // Kept for the supervisor, which saves the case of a contract break.
        let _ = std::fs::create_dir_all(case);
        let _ = std::fs::write(case.join("in.txt"), &text);
        Some(match target {
            "hostile_preset" => sample_and_apply(&text, rng),
            _ => import(&text),
        })
    }

    fn pair(rng: &mut Rng) -> String {
        let (a, b) = (*rng.pick(&NUMBERS), *rng.pick(&NUMBERS));
        if rng.below(3) != 0 {
            format!("[{a}, {b}]")
        } else {
            let b = b.trim_start_matches('-');
            format!("[-{b}, {b}]")
        }
    }

    fn preset_text(rng: &mut Rng) -> String {
        let mut t = String::from("version = 1\n");
        if rng.below(2) == 0 {
            t += "space = \"mm\"\n";
        }
        if rng.below(2) == 0 {
            let p = rng.pick(&["0.01", "1.0"]);
            let unit = rng.pick(&["voxel", "mm"]);
            t += &format!(
                "[translate]\np = {p}\nrange = [{}]\nunit = \"{unit}\"\n",
                pair(rng)
            );
        }
        if rng.below(2) == 0 {
            let d = rng.pick(&["uniform", "split"]);
            t += &format!("[scale]\nrange = [{}]\ndistribution = \"{d}\"\n", pair(rng));
        }
        if rng.below(2) == 0 {
            let (a, s) = (pair(rng), pair(rng));
            t += &format!("[elastic]\np = 0.5\nalpha = {a}\nsigma = {s}\n");
        }
        if rng.below(2) == 0 {
            t += &format!("[rotate]\nrange_deg = [{}]\n", pair(rng));
        }
        t
    }

    /// A preset that parses and fits the grid and its spacing samples without error, and every
    /// sample applies or says why.
    fn sample_and_apply(text: &str, rng: &mut Rng) -> Result<(), String> {
        let p = match Preset::parse(text) {
            Ok(p) => p,
            Err(e) => return check_message(&e.to_string()),
        };
        let ndim = 2 + rng.below(2);
        let shape = if ndim == 2 { vec![5, 6] } else { vec![3, 4, 5] };
        let spacing: Vec<f64> = (0..ndim).map(|_| *rng.pick(&SPACINGS)).collect();
        if let Err(e) = p.check_ndim(ndim).and_then(|()| p.check_spacing(&spacing)) {
            return check_message(&e.to_string());
        }
        let n: usize = shape.iter().product();
        let mut vol = augscope::Volume::new((0..n).map(|i| i as f32).collect(), shape, 1);
        vol.spacing_mm = spacing;
        for k in 0..3 {
            let s = p
                .sample(
                    rng.next().wrapping_add(k),
                    ndim,
                    vol.channels,
                    &vol.spacing_mm,
                )
                .map_err(|e| format!("a preset that fits its grid failed to sample: {e}"))?;
            if let Err(e) = apply_new(&CpuBackend::new(), &s.plan, &vol, None) {
                check_message(&e.to_string())?;
            }
        }
        Ok(())
    }

    /// A plan in mm space on a voxel size from `SPACINGS`: applied, or refused with a message.
    fn tiny_spacing(rng: &mut Rng) -> Result<(), String> {
        let ndim = 2 + rng.below(2);
        let shape = if ndim == 2 { vec![6, 7] } else { vec![4, 6, 7] };
        let n: usize = shape.iter().product();
        let mut vol = augscope::Volume::new((0..n).map(|i| (i % 9) as f32).collect(), shape, 1);
        vol.spacing_mm = (0..ndim).map(|_| *rng.pick(&SPACINGS)).collect();
        let mut plan = Plan {
            space: Space::Mm,
            spacing_mm: vol.spacing_mm.clone(),
            ..Plan::default()
        };
        match rng.below(3) {
            0 => {
                plan.elastic = Some(Elastic {
                    alpha: 5.0,
                    sigma: 2.0,
                    seed: 1,
                })
            }
            1 => plan.translate = (0..ndim).map(|a| a as f64 - 1.0).collect(),
            _ => plan.rotate_rad = vec![0.2; if ndim == 2 { 1 } else { 3 }],
        }
        if let Err(e) = apply_new(&CpuBackend::new(), &plan, &vol, None) {
            check_message(&e.to_string())?;
        }
        let preset = Preset::parse(
            "version = 1\nspace = \"mm\"\n[translate]\nunit = \"mm\"\nrange = [[-3.0, 3.0]]\n\
             [elastic]\nalpha = [1.0, 4.0]\nsigma = [2.0, 3.0]\n",
        )
        .map_err(|e| e.to_string())?;
        match preset.sample(rng.next(), ndim, vol.channels, &vol.spacing_mm) {
            Err(e) => check_message(&e.to_string()),
            Ok(s) => match apply_new(&CpuBackend::new(), &s.plan, &vol, None) {
                Err(e) => check_message(&e.to_string()),
                Ok(_) => Ok(()),
            },
        }
    }

    /// A parameter dict with orders from `ORDERS`, or a plan flipping an axis beside a shape.
    fn import_text(rng: &mut Rng) -> String {
        if rng.below(2) == 0 {
            let (o, s) = (*rng.pick(&ORDERS), *rng.pick(&ORDERS));
            let mut t = format!("{{\"do_rotation\": true, \"order_data\": {o}, \"order_seg\": {s}");
            if rng.below(2) == 0 {
                t += &format!(", \"mirror_axes\": [{}]", rng.pick(&["0", "2", "3", "-1"]));
            }
            if rng.below(2) == 0 {
                let (a, g) = (rng.pick(&NUMBERS), rng.pick(&NUMBERS));
                t += &format!(
                    ", \"do_elastic_deform\": true, \"alpha\": [0, {a}], \"sigma\": [1, {g}]"
                );
            }
            t += "}";
            t
        } else {
            let ndim = 2 + rng.below(2);
            let axis = *rng.pick(&[0usize, 1, 2, 3, 7]);
            let shape = vec!["5"; ndim].join(", ");
            let mut plan = format!("\"flip\": [{axis}]");
            if rng.below(2) == 0 {
                let t = rng.pick(&NUMBERS);
                plan += &format!(", \"translate\": [{t}{}]", ", 0".repeat(ndim - 1));
            }
            format!("{{\"shape\": [{shape}], \"seed\": 1, \"plan\": {{{plan}}}}}")
        }
    }

    /// What the import accepts is a valid preset; what it must refuse it refuses.
    fn import(text: &str) -> Result<(), String> {
        let must_refuse = text_must_refuse(text);
        match augscope::export::import::import(text, "fuzz") {
            Err(e) => check_message(&e.to_string()),
            Ok(_) if must_refuse => Err(format!("accepted what it must refuse: {text}")),
            Ok(p) => {
                let again = Preset::parse(&p.to_toml())
                    .map_err(|e| format!("an imported preset does not parse: {e}"))?;
                again
                    .validate()
                    .map_err(|e| format!("an imported preset is invalid: {e}"))
            }
        }
    }

    /// Whether `text` holds an order or a flipped axis the import must refuse.
    fn text_must_refuse(text: &str) -> bool {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
            return false;
        };
        let bad_order = |k: &str, ok: &[u64]| match v.get(k) {
            None | Some(serde_json::Value::Null) => false,
            Some(o) => !o.as_u64().is_some_and(|o| ok.contains(&o)),
        };
        let ndim = v
            .get("shape")
            .and_then(|s| s.as_array())
            .map_or(3, Vec::len) as u64;
        let bad_flip = v
            .pointer("/plan/flip")
            .and_then(|f| f.as_array())
            .is_some_and(|f| f.iter().any(|a| a.as_u64().is_none_or(|a| a >= ndim)));
        bad_order("order_data", &[0, 1, 3])
            || bad_order("order_seg", &[0, 1, 2, 3, 4, 5])
            || bad_flip
    }
}
