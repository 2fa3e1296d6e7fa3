//! Compiled kernels on disk, so that no process pays for NVRTC or the driver's JIT twice.
//!
//! NVRTC compiles each kernel family straight to CUBIN for the device's architecture, which the
//! driver loads as it is (PTX would be JIT-compiled by the driver on every fresh host). The CUBIN
//! and the module's entry names are kept in the user's cache folder:
//! `$AUGSCOPE_CACHE_DIR/kernels`, else `$XDG_CACHE_HOME/augscope/kernels`, else
//! `~/.cache/augscope/kernels` (`%LOCALAPPDATA%\augscope\kernels` on Windows).
//! `AUGSCOPE_KERNEL_CACHE=0` turns the disk cache off.
//!
//! An entry is named by a 128-bit hash of its key: the kernel source, every compile option
//! (defines included), the architecture and the NVRTC and driver versions. The file repeats the
//! whole key and carries a checksum, so a hash collision, a truncated or a corrupt file is a
//! miss, never a wrong kernel. Entries are written to a temporary file and renamed into place,
//! so concurrent processes never read half an entry.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const MAGIC: &[u8; 16] = b"augscope-cubin-1";
/// Entry names and images above these sizes are not augscope's: the entry is corrupt.
const MAX_KEY: usize = 1 << 16;
const MAX_ENTRIES: usize = 4096;
const MAX_IMAGE: u64 = 1 << 30;

static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);
static COMPILE_US: AtomicU64 = AtomicU64::new(0);

/// A compiled module: a CUBIN (or PTX where the architecture is unknown) and its entry names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compiled {
    pub image: Vec<u8>,
    pub entries: Vec<String>,
}

/// This process's use of the cache: entries found on disk, modules compiled, and the time NVRTC
/// took for them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub compile_ms: f64,
}

pub fn stats() -> CacheStats {
    CacheStats {
        hits: HITS.load(Ordering::Relaxed),
        misses: MISSES.load(Ordering::Relaxed),
        compile_ms: COMPILE_US.load(Ordering::Relaxed) as f64 / 1e3,
    }
}

pub(crate) fn count_hit() {
    HITS.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn count_compile(us: u64) {
    MISSES.fetch_add(1, Ordering::Relaxed);
    COMPILE_US.fetch_add(us, Ordering::Relaxed);
}

/// The folder of compiled kernels, or None when the disk cache is off or no folder is known.
pub fn dir() -> Option<PathBuf> {
    if std::env::var("AUGSCOPE_KERNEL_CACHE").is_ok_and(|v| v == "0" || v == "off") {
        return None;
    }
    let env_dir = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let root = if let Some(d) = env_dir("AUGSCOPE_CACHE_DIR") {
        d
    } else if let Some(d) = env_dir("XDG_CACHE_HOME") {
        d.join("augscope")
    } else if cfg!(windows) {
        env_dir("LOCALAPPDATA")?.join("augscope")
    } else {
        env_dir("HOME")?.join(".cache").join("augscope")
    };
    Some(root.join("kernels"))
}

/// Two independent 64-bit FNV-1a hashes (different offsets), as one 128-bit name.
fn hash128(bytes: &[u8]) -> u128 {
    let mut a: u64 = 0xcbf2_9ce4_8422_2325;
    let mut b: u64 = 0x6c62_272e_07bb_0142;
    for &x in bytes {
        a = (a ^ x as u64).wrapping_mul(0x0000_0100_0000_01b3);
        b = (b ^ (x as u64).rotate_left(3) ^ 0x5a).wrapping_mul(0x0000_0100_0000_01b3);
    }
    ((a as u128) << 64) | b as u128
}

fn checksum(bytes: &[u8]) -> u64 {
    (hash128(bytes) >> 64) as u64
}

/// The cache key of one compile: everything that decides the bytes NVRTC makes.
pub fn key(
    source_name: &str,
    source: &str,
    options: &[String],
    arch: &str,
    nvrtc: (i32, i32),
    driver: i32,
) -> String {
    format!(
        "source={source_name} {:032x} {} bytes\narch={arch}\nnvrtc={}.{}\ndriver={driver}\noptions={}",
        hash128(source.as_bytes()),
        source.len(),
        nvrtc.0,
        nvrtc.1,
        options.join("\u{1f}")
    )
}

fn entry_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{:032x}.cubin", hash128(key.as_bytes())))
}

fn encode(key: &str, c: &Compiled) -> Vec<u8> {
    let mut out = Vec::with_capacity(c.image.len() + key.len() + 256);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&(c.entries.len() as u32).to_le_bytes());
    for e in &c.entries {
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
        out.extend_from_slice(e.as_bytes());
    }
    out.extend_from_slice(&(c.image.len() as u64).to_le_bytes());
    out.extend_from_slice(&c.image);
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Reads bytes off the front of a slice; None past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u32(&mut self) -> Option<usize> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// The entry of `key` in `bytes`, or None when the bytes are not a whole, intact entry of it.
fn decode(bytes: &[u8], key: &str) -> Option<Compiled> {
    if bytes.len() < MAGIC.len() + 8 {
        return None;
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    if checksum(body).to_le_bytes() != sum {
        return None;
    }
    let mut r = Reader(body);
    if r.take(MAGIC.len())? != MAGIC {
        return None;
    }
    let klen = r.u32()?;
    if klen > MAX_KEY || r.take(klen)? != key.as_bytes() {
        return None;
    }
    let n = r.u32()?;
    if n > MAX_ENTRIES {
        return None;
    }
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.u32()?;
        if len > MAX_KEY {
            return None;
        }
        entries.push(String::from_utf8(r.take(len)?.to_vec()).ok()?);
    }
    let ilen = r.u64()?;
    if ilen > MAX_IMAGE {
        return None;
    }
    let image = r.take(ilen as usize)?.to_vec();
    if !r.0.is_empty() || image.is_empty() {
        return None;
    }
    Some(Compiled { image, entries })
}

/// The cached module of `key` in `dir`; None on a miss, a corrupt entry or an unreadable file.
pub fn read(dir: &Path, key: &str) -> Option<Compiled> {
    let bytes = std::fs::read(entry_path(dir, key)).ok()?;
    decode(&bytes, key)
}

/// Stores the module of `key` in `dir` (created if needed): written whole to a temporary file,
/// then renamed over any older entry. A cache that cannot be written is not an error: the
/// module was compiled and is used; the next process compiles it again.
pub fn write(dir: &Path, key: &str, c: &Compiled) {
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let path = entry_path(dir, key);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(
        ".{}.{}.{nanos}.tmp",
        path.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        std::process::id()
    ));
    if std::fs::write(&tmp, encode(key, c)).is_err() || std::fs::rename(&tmp, &path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Removes an entry that could not be used (e.g. a CUBIN the driver refused).
pub fn forget(dir: &Path, key: &str) {
    let _ = std::fs::remove_file(entry_path(dir, key));
}

fn is_entry(name: &str) -> bool {
    let stem = name.strip_suffix(".cubin");
    stem.is_some_and(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        || (name.starts_with('.') && name.ends_with(".tmp") && name.contains(".cubin."))
}

/// The number of entries in `dir` and their total size in bytes.
pub fn usage(dir: &Path) -> (usize, u64) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    rd.flatten()
        .filter(|e| is_entry(&e.file_name().to_string_lossy()))
        .fold((0, 0), |(n, b), e| {
            (n + 1, b + e.metadata().map_or(0, |m| m.len()))
        })
}

/// Removes every entry of `dir` (augscope's files only; the folder and anything else in it
/// stay). Returns how many were removed.
pub fn clear(dir: &Path) -> std::io::Result<usize> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut n = 0;
    for e in rd.flatten() {
        if is_entry(&e.file_name().to_string_lossy()) {
            std::fs::remove_file(e.path())?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Compiled {
        Compiled {
            image: (0..5000u32).map(|i| (i * 7 % 251) as u8).collect(),
            entries: vec!["resample_f32".into(), "field_stats_f32".into()],
        }
    }

    #[test]
    fn an_entry_round_trips_and_only_for_its_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let k = key(
            "resample.cu",
            "src",
            &["-DORDER=1".into()],
            "sm_90",
            (13, 0),
            13000,
        );
        write(dir.path(), &k, &sample());
        assert_eq!(read(dir.path(), &k), Some(sample()));
        let other = key(
            "resample.cu",
            "src",
            &["-DORDER=3".into()],
            "sm_90",
            (13, 0),
            13000,
        );
        assert_eq!(read(dir.path(), &other), None);
        assert_eq!(usage(dir.path()).0, 1);
    }

    #[test]
    fn the_key_changes_with_everything_that_changes_the_binary() {
        let base = key("f.cu", "src", &["-DA".into()], "sm_90", (13, 0), 13000);
        for other in [
            key("f.cu", "src2", &["-DA".into()], "sm_90", (13, 0), 13000),
            key("f.cu", "src", &["-DB".into()], "sm_90", (13, 0), 13000),
            key("f.cu", "src", &["-DA".into()], "sm_100", (13, 0), 13000),
            key("f.cu", "src", &["-DA".into()], "sm_90", (13, 1), 13000),
            key("f.cu", "src", &["-DA".into()], "sm_90", (13, 0), 13010),
        ] {
            assert_ne!(base, other);
            assert_ne!(hash128(base.as_bytes()), hash128(other.as_bytes()));
        }
    }

    #[test]
    fn a_corrupt_or_truncated_entry_is_a_miss() {
        let dir = tempfile::tempdir().expect("tempdir");
        let k = key("f.cu", "src", &[], "sm_90", (13, 0), 13000);
        write(dir.path(), &k, &sample());
        let path = entry_path(dir.path(), &k);
        let good = std::fs::read(&path).expect("entry");
        for cut in [0, 10, good.len() / 2, good.len() - 1] {
            std::fs::write(&path, &good[..cut]).expect("write");
            assert_eq!(read(dir.path(), &k), None, "cut at {cut}");
        }
        for i in [0, 20, good.len() / 2, good.len() - 3] {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            std::fs::write(&path, &bad).expect("write");
            assert_eq!(read(dir.path(), &k), None, "flipped byte {i}");
        }
        // A rewrite replaces the corrupt entry.
        write(dir.path(), &k, &sample());
        assert_eq!(read(dir.path(), &k), Some(sample()));
    }

    #[test]
    fn clear_removes_entries_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        for i in 0..3 {
            let k = key("f.cu", &format!("src{i}"), &[], "sm_90", (13, 0), 13000);
            write(dir.path(), &k, &sample());
        }
        std::fs::write(dir.path().join("notes.txt"), "keep").expect("write");
        assert_eq!(clear(dir.path()).expect("clear"), 3);
        assert_eq!(usage(dir.path()), (0, 0));
        assert!(dir.path().join("notes.txt").exists());
        assert_eq!(clear(&dir.path().join("missing")).expect("clear"), 0);
    }
}
