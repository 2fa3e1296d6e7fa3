//! NumPy `.npy` read and write (format versions 1, 2 and 3; C and Fortran order; bool, u8, i8,
//! u16, i16, u32, i32, u64, i64, f32, f64 in either byte order).
//!
//! Arrays come back in C order; a `.npy` array's axes are the array axes of docs/design.md §2 (`[z, y, x]`).

use std::io::{Read, Write};
use std::path::Path;

use super::{IoError, SaveOptions, atomic_write};
use crate::core::volume::{DType, Volume};

const FORMAT: &str = "NumPy";

/// An array read from a `.npy` file, converted to f32, in C order.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    pub data: Vec<f32>,
    pub shape: Vec<usize>,
    pub dtype: DType,
}

#[derive(Clone, Copy)]
struct Descr {
    dtype: DType,
    size: usize,
    big_endian: bool,
    is_bool: bool,
}

fn parse_descr(d: &str) -> Option<Descr> {
    // The first character, whatever its width (a non-ASCII one is refused below, not split).
    let (order, code) = d.split_at(d.chars().next().map_or(0, char::len_utf8));
    let big_endian = match order {
        ">" => true,
        "<" | "|" | "=" => false,
        _ => return None,
    };
    let (dtype, size, is_bool) = match code {
        "b1" | "?" => (DType::U8, 1, true),
        "u1" | "B" => (DType::U8, 1, false),
        "i1" | "b" => (DType::I8, 1, false),
        "u2" => (DType::U16, 2, false),
        "i2" => (DType::I16, 2, false),
        "u4" => (DType::U32, 4, false),
        "i4" => (DType::I32, 4, false),
        "u8" => (DType::U64, 8, false),
        "i8" => (DType::I64, 8, false),
        "f4" => (DType::F32, 4, false),
        "f8" => (DType::F64, 8, false),
        _ => return None,
    };
    Some(Descr {
        dtype,
        size,
        big_endian,
        is_bool,
    })
}

/// Finds `'key': value` in a header dict and returns the text of the value.
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let k = format!("'{key}'");
    let start = header.find(&k)? + k.len();
    let rest = header[start..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else if let Some(stripped) = rest.strip_prefix('\'') {
        stripped.find('\'')? + 2
    } else {
        rest.find([',', '}']).unwrap_or(rest.len())
    };
    Some(rest[..end].trim())
}

/// The longest header read: numpy's `max_header_size` (np.load refuses a longer one unless it
/// is told to trust the file).
const MAX_HEADER_BYTES: usize = 10_000;

/// What a `.npy` header declares: the data's type, order and shape, where the data starts and
/// how many bytes it takes.
struct Header {
    descr: Descr,
    fortran: bool,
    shape: Vec<usize>,
    data_start: usize,
    nbytes: usize,
}

/// Where the header of a `.npy` file ends (the data starts), from its first 12 bytes (or all of
/// a shorter file).
fn header_end(pre: &[u8], path: &Path) -> Result<usize, IoError> {
    let err = |why: String| IoError::read(FORMAT, why, path);
    if pre.len() < 10 || &pre[..6] != b"\x93NUMPY" {
        return Err(err("not a .npy file (bad magic)".into()));
    }
    let (hlen, hstart) = match pre[6] {
        1 => (u16::from_le_bytes([pre[8], pre[9]]) as usize, 10usize),
        2 | 3 => {
            if pre.len() < 12 {
                return Err(err("truncated header".into()));
            }
            (
                u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]]) as usize,
                12,
            )
        }
        v => return Err(err(format!("unsupported format version {v}"))),
    };
    if hlen > MAX_HEADER_BYTES {
        return Err(err(format!(
            "a header of {hlen} bytes (numpy reads at most {MAX_HEADER_BYTES})"
        )));
    }
    Ok(hstart + hlen)
}

/// The header of a `.npy` file from its first bytes (at least up to [`header_end`]).
fn parse_header(bytes: &[u8], path: &Path) -> Result<Header, IoError> {
    let err = |why: String| IoError::read(FORMAT, why, path);
    let hend = header_end(bytes, path)?;
    let hstart = if bytes[6] == 1 { 10 } else { 12 };
    let Some(header) = bytes.get(hstart..hend) else {
        return Err(err("truncated header".into()));
    };
    let header = std::str::from_utf8(header).map_err(|_| err("header is not text".into()))?;
    let descr_txt =
        dict_value(header, "descr").ok_or_else(|| err("header has no 'descr'".into()))?;
    let descr_s = descr_txt.trim_matches('\'');
    let descr = parse_descr(descr_s).ok_or_else(|| {
        err(format!(
            "unsupported dtype '{descr_s}' (expected bool, integer or float)"
        ))
    })?;
    let fortran = match dict_value(header, "fortran_order") {
        Some("True") => true,
        Some("False") => false,
        _ => return Err(err("header has no valid 'fortran_order'".into())),
    };
    let shape_txt =
        dict_value(header, "shape").ok_or_else(|| err("header has no 'shape'".into()))?;
    let inner = shape_txt
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| err(format!("bad shape {shape_txt}")))?;
    let shape: Vec<usize> = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| err(format!("bad shape {shape_txt}")))?;
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| err(format!("shape {shape:?} overflows")))?;
    let nbytes = count
        .checked_mul(descr.size)
        .ok_or_else(|| err(format!("shape {shape:?} overflows")))?;
    Ok(Header {
        descr,
        fortran,
        shape,
        data_start: hend,
        nbytes,
    })
}

/// The array of a header and its data bytes (`nbytes` of them).
fn array(h: Header, body: &[u8]) -> NpyArray {
    array_with(h, body, false).0
}

/// [`array`], and with `exact` the values of a 32- or 64-bit integer array as they are (f32
/// rounds those beyond 2^24), in C order.
fn array_with(h: Header, body: &[u8], exact: bool) -> (NpyArray, Option<Vec<i128>>) {
    let mut data = decode(&body[..h.nbytes], h.descr);
    let mut wide = if exact {
        decode_wide(&body[..h.nbytes], h.descr)
    } else {
        None
    };
    if h.fortran && h.shape.len() > 1 {
        data = fortran_to_c(&data, &h.shape);
        wide = wide.map(|w| fortran_to_c(&w, &h.shape));
    }
    let dtype = if h.descr.is_bool {
        DType::U8
    } else {
        h.descr.dtype
    };
    let a = NpyArray {
        data,
        shape: h.shape,
        dtype,
    };
    (a, wide)
}

/// The values of type `$t` stored in `$b` (big-endian when `$big`), each converted `as $out`.
macro_rules! values_as {
    ($b:expr, $big:expr, $t:ty, $out:ty) => {{
        const N: usize = std::mem::size_of::<$t>();
        $b.chunks_exact(N)
            .map(|c| {
                let a: [u8; N] = c.try_into().unwrap_or([0; N]);
                (if $big {
                    <$t>::from_be_bytes(a)
                } else {
                    <$t>::from_le_bytes(a)
                }) as $out
            })
            .collect()
    }};
}

/// The values of a 32- or 64-bit integer array, exactly (`None` for other types, which f32
/// holds exactly or which are floats).
fn decode_wide(b: &[u8], d: Descr) -> Option<Vec<i128>> {
    if d.is_bool {
        return None;
    }
    super::wide_integers(b, d.dtype, d.big_endian)
}

fn truncated(h: &Header, have: u64, path: &Path) -> IoError {
    IoError::read(
        FORMAT,
        format!(
            "truncated data: shape {:?} needs {} bytes, the file holds {have}",
            h.shape, h.nbytes
        ),
        path,
    )
}

/// Reads a `.npy` array from bytes; bytes after the array's data are ignored, as `np.load` does.
pub fn parse(bytes: &[u8], path: &Path) -> Result<NpyArray, IoError> {
    let h = parse_header(bytes, path)?;
    let body = &bytes[h.data_start..];
    if body.len() < h.nbytes {
        return Err(truncated(&h, body.len() as u64, path));
    }
    Ok(array(h, body))
}

fn decode(b: &[u8], d: Descr) -> Vec<f32> {
    let big = d.big_endian;
    if d.is_bool {
        return b.iter().map(|&v| (v != 0) as u8 as f32).collect();
    }
    match d.dtype {
        DType::U8 => b.iter().map(|&v| v as f32).collect(),
        DType::I8 => b.iter().map(|&v| v as i8 as f32).collect(),
        DType::U16 => values_as!(b, big, u16, f32),
        DType::I16 => values_as!(b, big, i16, f32),
        DType::U32 => values_as!(b, big, u32, f32),
        DType::I32 => values_as!(b, big, i32, f32),
        DType::U64 => values_as!(b, big, u64, f32),
        DType::I64 => values_as!(b, big, i64, f32),
        DType::F32 => values_as!(b, big, f32, f32),
        DType::F64 => values_as!(b, big, f64, f32),
    }
}

/// Reorders a Fortran-order buffer (first axis fastest) into C order.
fn fortran_to_c<T: Copy + Default>(src: &[T], shape: &[usize]) -> Vec<T> {
    let n = src.len();
    let d = shape.len();
    let mut fstride = vec![1usize; d];
    for a in 1..d {
        fstride[a] = fstride[a - 1] * shape[a - 1];
    }
    let mut out = vec![T::default(); n];
    let mut idx = vec![0usize; d];
    for o in out.iter_mut() {
        *o = src[idx.iter().zip(&fstride).map(|(i, s)| i * s).sum::<usize>()];
        for a in (0..d).rev() {
            idx[a] += 1;
            if idx[a] < shape[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    out
}

/// Reads a `.npy` file.
///
/// Only the header and the array's data are read: bytes after them are ignored (as `np.load`
/// does), however many there are.
pub fn read(path: &Path) -> Result<NpyArray, IoError> {
    read_with(path, false).map(|(a, _)| a)
}

/// [`read`], with the exact values of a 32- or 64-bit integer array when `exact` (see
/// [`array_with`]).
fn read_with(path: &Path, exact: bool) -> Result<(NpyArray, Option<Vec<i128>>), IoError> {
    let io_err = |e: std::io::Error| IoError::read(FORMAT, e.to_string(), path);
    let mut f = std::fs::File::open(path).map_err(io_err)?;
    let size = f.metadata().map_err(io_err)?.len();
    let mut head = Vec::with_capacity(128);
    (&mut f).take(12).read_to_end(&mut head).map_err(io_err)?;
    let hend = header_end(&head, path)?;
    (&mut f)
        .take((hend - head.len().min(hend)) as u64)
        .read_to_end(&mut head)
        .map_err(io_err)?;
    let h = parse_header(&head, path)?;
    let have = size.saturating_sub(h.data_start as u64);
    if have < h.nbytes as u64 {
        return Err(truncated(&h, have, path));
    }
    let mut body = Vec::new();
    body.try_reserve_exact(h.nbytes).map_err(|_| {
        IoError::read(
            FORMAT,
            format!(
                "the array needs {} bytes of memory, more than this machine can allocate",
                h.nbytes
            ),
            path,
        )
    })?;
    (&mut f)
        .take(h.nbytes as u64)
        .read_to_end(&mut body)
        .map_err(io_err)?;
    if body.len() < h.nbytes {
        return Err(truncated(&h, body.len() as u64, path));
    }
    Ok(array_with(h, &body, exact))
}

/// Reads a `.npy` file as a 2D or 3D volume; with `channels_first` the first axis is channels.
pub fn read_volume(path: &Path, channels_first: bool) -> Result<Volume, IoError> {
    read_volume_with(path, channels_first, false)
}

/// [`read_volume`]; with `label`, a label map whose integer values f32 cannot all hold comes as
/// codes into a table of its exact values ([`crate::core::LabelValues`]).
pub fn read_volume_with(path: &Path, channels_first: bool, label: bool) -> Result<Volume, IoError> {
    let (a, wide) = read_with(path, label)?;
    let (channels, shape) = if channels_first {
        match a.shape.split_first() {
            Some((&c, rest)) => (c, rest.to_vec()),
            None => (1, vec![]),
        }
    } else {
        (1, a.shape.clone())
    };
    if !(2..=3).contains(&shape.len()) {
        let hint = if !channels_first && a.shape.len() == 4 {
            " (pass --channels if the first axis is channels)"
        } else {
            ""
        };
        return Err(IoError::read(
            FORMAT,
            format!("array of shape {:?} is not a 2D or 3D image{hint}", a.shape),
            path,
        ));
    }
    if channels == 0 || shape.contains(&0) {
        return Err(IoError::read(
            FORMAT,
            format!("array of shape {:?} has an empty axis", a.shape),
            path,
        ));
    }
    let mut v = Volume::new(a.data, shape, channels);
    v.dtype = a.dtype;
    if let Some(w) = wide {
        super::exact_labels(&mut v, &w, path)?;
    }
    Ok(v)
}

fn descr_of(dtype: DType) -> &'static str {
    match dtype {
        DType::U8 => "|u1",
        DType::I8 => "|i1",
        DType::U16 => "<u2",
        DType::I16 => "<i2",
        DType::U32 => "<u4",
        DType::I32 => "<i4",
        DType::U64 => "<u8",
        DType::I64 => "<i8",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
    }
}

fn header_bytes(dtype: DType, shape: &[usize]) -> Vec<u8> {
    let shape_s = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut h = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape_s}, }}",
        descr_of(dtype)
    );
    // Pad so that the data starts on a 64-byte boundary, header ends with '\n'.
    let total = 10 + h.len() + 1;
    h.push_str(&" ".repeat((64 - total % 64) % 64));
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out
}

/// Writes `data` (C order, `shape`) as little-endian `dtype`, rounding and clamping integers.
pub fn write(path: &Path, data: &[f32], shape: &[usize], dtype: DType) -> Result<(), IoError> {
    let n: usize = shape.iter().product();
    if n != data.len() {
        return Err(IoError::write(
            FORMAT,
            format!("shape {shape:?} does not match {} values", data.len()),
            path,
        ));
    }
    atomic_write(path, FORMAT, |w| {
        w.write_all(&header_bytes(dtype, shape))?;
        let mut buf = Vec::with_capacity(1 << 16);
        for chunk in data.chunks(8192) {
            buf.clear();
            for &v in chunk {
                let q = dtype.quantize(v);
                match dtype {
                    DType::U8 => buf.push(q as u8),
                    DType::I8 => buf.push(q as i8 as u8),
                    DType::U16 => buf.extend_from_slice(&(q as u16).to_le_bytes()),
                    DType::I16 => buf.extend_from_slice(&(q as i16).to_le_bytes()),
                    DType::U32 => buf.extend_from_slice(&(q as u32).to_le_bytes()),
                    DType::I32 => buf.extend_from_slice(&(q as i32).to_le_bytes()),
                    DType::U64 => buf.extend_from_slice(&(q as u64).to_le_bytes()),
                    DType::I64 => buf.extend_from_slice(&(q as i64).to_le_bytes()),
                    DType::F32 => buf.extend_from_slice(&v.to_le_bytes()),
                    DType::F64 => buf.extend_from_slice(&(v as f64).to_le_bytes()),
                }
            }
            w.write_all(&buf)?;
        }
        Ok(())
    })
}

/// Writes a volume as `.npy`: `(c, *shape)` when it has several channels, else `shape`.
pub fn write_volume(path: &Path, vol: &Volume, opts: &SaveOptions) -> Result<(), IoError> {
    let mut shape = vol.shape.clone();
    if vol.channels > 1 {
        shape.insert(0, vol.channels);
    }
    let dtype = if opts.keep_dtype {
        vol.dtype
    } else {
        DType::F32
    };
    match &vol.label_values {
        Some(t) if dtype.is_integer() => write_exact(path, &t.decode(&vol.data), &shape, dtype),
        Some(t) => {
            let values: Vec<f32> = t.decode(&vol.data).iter().map(|&v| v as f32).collect();
            write(path, &values, &shape, dtype)
        }
        None => write(path, &vol.data, &shape, dtype),
    }
}

/// Writes the exact integer values of a label map (C order, `shape`) as little-endian `dtype`,
/// clamped to its range.
fn write_exact(path: &Path, values: &[i128], shape: &[usize], dtype: DType) -> Result<(), IoError> {
    atomic_write(path, FORMAT, |w| {
        w.write_all(&header_bytes(dtype, shape))?;
        let mut buf = Vec::with_capacity(1 << 16);
        for chunk in values.chunks(8192) {
            buf.clear();
            super::encode_exact(chunk, dtype, &mut buf);
            w.write_all(&buf)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_dtype() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<f32> = (0..24).map(|i| i as f32 * 3.0).collect();
        for dt in [
            DType::U8,
            DType::I16,
            DType::U16,
            DType::I32,
            DType::F32,
            DType::F64,
        ] {
            let p = dir.path().join(format!("a_{dt}.npy"));
            write(&p, &data, &[2, 3, 4], dt).unwrap();
            let a = read(&p).unwrap();
            assert_eq!(a.shape, vec![2, 3, 4]);
            assert_eq!(a.dtype, dt);
            assert_eq!(a.data, data);
        }
    }

    #[test]
    fn fortran_order_is_reordered() {
        // np.asfortranarray(np.arange(6, dtype='<i2').reshape(2, 3)) stored column-major.
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        let h = "{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3), }          \n";
        bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
        bytes.extend_from_slice(h.as_bytes());
        for v in [0i16, 3, 1, 4, 2, 5] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let a = parse(&bytes, Path::new("f.npy")).unwrap();
        assert_eq!(a.data, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    #[test]
    fn hostile_headers_are_errors() {
        let p = Path::new("x.npy");
        assert!(parse(b"PK\x03\x04 not numpy", p).is_err());
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 9999), }\n";
        bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
        bytes.extend_from_slice(h.as_bytes());
        let e = parse(&bytes, p).unwrap_err().to_string();
        assert!(e.contains("overflows") || e.contains("truncated"), "{e}");
        // A descr that starts with a character wider than one byte is an error, not a panic.
        for descr in ["é4", "\u{1f600}f4", ""] {
            let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
            let h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (2,), }}\n");
            bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
            bytes.extend_from_slice(h.as_bytes());
            bytes.extend_from_slice(&[0; 8]);
            let e = parse(&bytes, p).unwrap_err().to_string();
            assert!(e.contains("unsupported dtype"), "{descr:?}: {e}");
        }
    }
}
