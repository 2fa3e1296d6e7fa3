//! A shared preset must never run code in a training script: whatever its text fields hold, the
//! exported Python parses, and no character of the preset's name, source or description lands
//! outside a comment or a string literal (checked with Python's own tokenizer).

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::io::Write;
use std::process::{Command, Stdio};

use augscope::augment::preset::{Preset, load_or_bundled};
use augscope::export::{Target, export};

const MARK: &str = "PAYLOAD_MARK";

/// Texts that would break out of a `#` comment or a string literal if pasted raw.
fn hostile() -> Vec<String> {
    [
        "x\nimport os; os.system('echo PAYLOAD_MARK')",
        "x\r__import__('os').system('PAYLOAD_MARK')",
        "x\r\nPAYLOAD_MARK = 1",
        "x\u{2028}PAYLOAD_MARK = 2",
        "x\u{2029}PAYLOAD_MARK = 3",
        "x\u{85}PAYLOAD_MARK = 4",
        "x\u{c}PAYLOAD_MARK = 5",
        "x\u{b}PAYLOAD_MARK = 6",
        "\"\"\"\nPAYLOAD_MARK = 7\n\"\"\"",
        "'''\nPAYLOAD_MARK = 8\n'''",
        "\\\nPAYLOAD_MARK = 9",
        "x\u{0}PAYLOAD_MARK = 10",
        "x\u{1b}[2J\nPAYLOAD_MARK = 11",
        "\u{feff}\nPAYLOAD_MARK = 12",
        "名前\u{200b}\nPAYLOAD_MARK = 13 # über",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Each source with every comment and string token removed, by Python's tokenize (which also
/// proves that it parses: `ast.parse` runs first), in one Python process. `Err` holds the first
/// source that does not parse, with Python's error.
fn code_outside_strings(sources: &[String]) -> Result<Vec<String>, String> {
    let script = r#"
import ast, io, json, sys, tokenize
skip = (tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1))
out = []
for i, src in enumerate(json.loads(sys.stdin.buffer.read().decode("utf-8"))):
    try:
        ast.parse(src)
        toks = tokenize.generate_tokens(io.StringIO(src).readline)
        out.append(" ".join(t.string for t in toks if t.type not in skip))
    except Exception as e:
        sys.exit(f"source {i}: {e!r}\n{src}")
sys.stdout.write(json.dumps(out))
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3: {e}"))?;
    let input = serde_json::to_vec(sources).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}

fn python_targets() -> [Target; 5] {
    [
        Target::Monai,
        Target::TorchIo,
        Target::Batchgenerators,
        Target::Nnunet,
        Target::Python,
    ]
}

fn with_text(base: &Preset, field: usize, text: &str) -> Preset {
    let mut p = base.clone();
    match field {
        0 => p.name = text.into(),
        1 => p.source = text.into(),
        _ => p.description = text.into(),
    }
    p
}

#[test]
fn hostile_text_stays_inside_comments_and_strings() {
    let base = load_or_bundled("nnunet-v2".as_ref()).unwrap();
    let mut cases = vec![];
    let mut sources = vec![];
    for text in hostile() {
        for field in 0..3 {
            let p = with_text(&base, field, &text);
            for target in python_targets() {
                for ndim in [2, 3] {
                    sources.push(export(&p, target, ndim).unwrap());
                    cases.push(format!("{target:?} {ndim}D, field {field}, text {text:?}"));
                }
            }
        }
    }
    let code = code_outside_strings(&sources).unwrap_or_else(|e| panic!("{e}"));
    for ((case, src), code) in cases.iter().zip(&sources).zip(&code) {
        assert!(
            !code.contains(MARK),
            "{case}: preset text reached live code:\n{src}"
        );
    }
}

#[test]
fn the_json_exports_keep_text_as_json() {
    let base = load_or_bundled("batchgenerators".as_ref()).unwrap();
    for text in hostile() {
        let p = with_text(&base, 0, &text);
        for target in [Target::BatchgeneratorsJson, Target::MonaiBundle] {
            let json = export(&p, target, 3).unwrap();
            serde_json::from_str::<serde_json::Value>(&json).unwrap();
        }
    }
}

#[test]
fn the_checker_sees_code_that_escapes() {
    // The check itself must be able to fail: a raw newline in a comment is live code.
    let code = code_outside_strings(&[
        format!("# name: x\n{MARK} = 1\n"),
        format!("# name: x\\n{MARK} = 1\n"),
    ])
    .unwrap();
    assert!(code[0].contains(MARK));
    assert!(!code[1].contains(MARK));
    assert!(code_outside_strings(&["x = (\n".into()]).is_err());
}

/// Every string of a JSON value.
fn strings(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        serde_json::Value::Object(m) => m.iter().for_each(|(k, x)| {
            out.push(k.clone());
            strings(x, out);
        }),
        _ => {}
    }
}

#[test]
fn no_preset_text_becomes_a_monai_bundle_expression() {
    // MONAI's ConfigParser evaluates strings that start with `$`, resolves `@` references and `%`
    // macros, wherever they stand when the whole config is parsed.
    let base = load_or_bundled("nnunet-v2".as_ref()).unwrap();
    for sigil in ["$", "@", "%", " $", "\n$"] {
        let name = format!("{sigil}__import__('os').system('{MARK}')");
        let p = with_text(&base, 0, &name);
        let json = export(&p, Target::MonaiBundle, 3).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let mut all = vec![];
        strings(&v, &mut all);
        for s in all.iter().filter(|s| s.contains(MARK)) {
            assert!(
                !s.starts_with(['$', '@', '%']),
                "preset text as a bundle expression: {s:?}"
            );
        }
        let back = augscope::export::interop::import_bundle(&json, "").unwrap();
        assert_eq!(back.name, name);
    }
}
