//! Reading a `.nii` or `.nii.gz`: gzip detection, the header, skipping extensions, and streaming
//! the voxels into float32 with the header's scaling applied.

use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::Path;

use flate2::read::MultiGzDecoder;

use super::affine::{affine, fixed_pixdim};
use super::header::{
    HEADER_LEN, HEADER2_LEN, Layout, Storage, Version, layout, parse_any, sniff, storage_name,
};
use super::{CHUNK_BYTES, FORMAT};
use crate::core::volume::{DType, Volume};
use crate::io::IoError;

/// Deflate cannot expand data by more than about 1032:1, which bounds what a `.nii.gz` of a
/// given size can hold before a single byte is decompressed.
const MAX_DEFLATE_RATIO: u64 = 1032;

/// Reads exactly `buf.len()` bytes unless the stream ends first; returns how many were read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Reads a NIfTI-1 or NIfTI-2 `.nii` or `.nii.gz` (gzip is recognised by its magic bytes,
/// whatever the name). Values, shape, spacing and affine are what nibabel reports: `nib.load(p).get_fdata()`
/// with NIfTI axes reversed to `[z, y, x]`, `img.affine`, and `header.get_zooms()` in array order.
/// 4D data becomes channels, RGB24 three channels. NaN and infinite voxels are kept as they are.
pub fn read(path: &Path) -> Result<Volume, IoError> {
    read_with(path, false)
}

/// [`read`]; with `label`, a label map whose integer values f32 cannot all hold comes as codes
/// into a table of its exact values ([`crate::core::LabelValues`]).
pub fn read_with(path: &Path, label: bool) -> Result<Volume, IoError> {
    // gzip and OS messages are one line, but a message must stay one line whatever the source.
    let err = |why: String| {
        IoError::read(
            FORMAT,
            why.split_whitespace().collect::<Vec<_>>().join(" "),
            path,
        )
    };
    let file = File::open(path).map_err(|e| err(e.to_string()))?;
    let file_len = file.metadata().map_err(|e| err(e.to_string()))?.len();
    let mut raw = BufReader::new(file);
    let gz = {
        let mut magic = [0u8; 2];
        let n = read_full(&mut raw, &mut magic).map_err(|e| err(e.to_string()))?;
        raw.seek(std::io::SeekFrom::Start(0))
            .map_err(|e| err(e.to_string()))?;
        n == 2 && magic == [0x1f, 0x8b]
    };
    let stream_err = |e: std::io::Error| {
        if gz {
            err(format!("corrupt gzip stream ({e})"))
        } else {
            err(e.to_string())
        }
    };
    let mut r: Box<dyn Read> = if gz {
        Box::new(MultiGzDecoder::new(raw))
    } else {
        Box::new(raw)
    };

    // The NIfTI-1 length first; a NIfTI-2 header (sizeof_hdr 540) is read on to its end.
    let mut hbuf = [0u8; HEADER2_LEN];
    let mut n = read_full(&mut r, &mut hbuf[..HEADER_LEN]).map_err(stream_err)?;
    if matches!(sniff(&hbuf[..n]), Ok((Version::Two, _))) {
        n += read_full(&mut r, &mut hbuf[HEADER_LEN..]).map_err(stream_err)?;
    }
    let parsed = parse_any(&hbuf[..n]).map_err(err)?;
    let lay = layout(parsed, (!gz).then_some(file_len)).map_err(err)?;
    let header_len = lay.version.header_len() as u64;
    let dim = &lay.wide.dim;

    // Skip extensions up to the data.
    let gap = lay.offset - header_len;
    let skipped =
        std::io::copy(&mut (&mut r).take(gap), &mut std::io::sink()).map_err(stream_err)?;
    if skipped < gap {
        return Err(err(format!(
            "vox_offset {} is beyond the end of the data ({} bytes)",
            lay.offset,
            header_len + skipped
        )));
    }
    let wide_ints = matches!(
        lay.storage,
        Storage::Scalar(DType::U32 | DType::I32 | DType::U64 | DType::I64)
    );
    let mut wide = (label && wide_ints && lay.scale.is_none()).then(Vec::new);
    let data =
        read_data(&mut r, &lay, gz.then_some(file_len), wide.as_mut()).map_err(|e| match e {
            DataError::Io(e) => stream_err(e),
            DataError::Short(got) => err(format!(
                "truncated data: dim {:?} of {} needs {} bytes from offset {}, the file has {got}",
                &dim[1..=dim[0] as usize],
                storage_name(lay.storage),
                lay.nbytes,
                lay.offset
            )),
            DataError::TooLarge(bytes) => err(format!(
                "dim {:?} needs {:.1} GB of memory as float32, more than this machine can allocate",
                &dim[1..=dim[0] as usize],
                bytes as f64 / 1e9
            )),
        })?;
    if gz {
        // Read the stream to its end so that gzip checks its CRC: a corrupt stream can inflate
        // to plausible bytes. Whatever follows the voxels is discarded, never stored.
        std::io::copy(&mut r, &mut std::io::sink()).map_err(stream_err)?;
    }

    let ndim = lay.shape.len();
    let zoom = fixed_pixdim(&lay.wide);
    let spacing_mm = zoom[..ndim].iter().rev().copied().collect();
    let world_from_voxel = affine(&lay.wide, lay.version).map_err(err)?;
    let mut vol = Volume {
        data,
        shape: lay.shape,
        channels: lay.channels,
        spacing_mm,
        world_from_voxel,
        dtype: lay.storage.dtype(),
        nifti_header: Some(Box::new(lay.header)),
        nifti2: (lay.version == Version::Two).then(|| Box::new(lay.wide)),
        default_window: None,
        oriented: true,
        label_values: None,
    };
    if let Some(w) = wide {
        crate::io::exact_labels(&mut vol, &w, path)?;
    }
    Ok(vol)
}

enum DataError {
    Io(std::io::Error),
    /// The stream ended after this many data bytes.
    Short(u64),
    /// This many bytes of f32 voxels could not be allocated.
    TooLarge(u64),
}

/// Streams the voxels into f32, channel-major, applying the scaling. Memory grows with the bytes
/// actually read, so a header that lies about its size cannot make us allocate it; `gz_len` is
/// the compressed size, which bounds what can come out of it.
fn read_data(
    r: &mut impl Read,
    lay: &Layout,
    gz_len: Option<u64>,
    mut wide: Option<&mut Vec<i128>>,
) -> Result<Vec<f32>, DataError> {
    let size = lay.storage.size();
    let total = lay.count * lay.channels;
    let plausible_bytes = match gz_len {
        Some(len) => lay.nbytes.min(len.saturating_mul(MAX_DEFLATE_RATIO)),
        None => lay.nbytes,
    };
    let per_voxel = if lay.storage == Storage::Rgb24 { 3 } else { 1 };
    let plausible = usize::try_from(plausible_bytes / size as u64)
        .unwrap_or(usize::MAX)
        .saturating_mul(per_voxel);
    // An honest header of 10^12 voxels must be an error line, not an allocation abort.
    let mut out: Vec<f32> = Vec::new();
    out.try_reserve_exact(total.min(plausible))
        .map_err(|_| DataError::TooLarge(total as u64 * 4))?;
    let mut rgb: [Vec<f32>; 2] = [Vec::new(), Vec::new()];
    let mut buf = vec![0u8; (CHUNK_BYTES / size) * size];
    let mut left = lay.nbytes;
    while left > 0 {
        let want = (buf.len() as u64).min(left) as usize;
        let got = read_full(r, &mut buf[..want]).map_err(DataError::Io)?;
        if got < want {
            return Err(DataError::Short(lay.nbytes - left + got as u64));
        }
        left -= want as u64;
        let bytes = &buf[..want];
        match lay.storage {
            Storage::Rgb24 => {
                for px in bytes.chunks_exact(3) {
                    out.push(px[0] as f32);
                    rgb[0].push(px[1] as f32);
                    rgb[1].push(px[2] as f32);
                }
            }
            Storage::Scalar(d) => {
                decode(bytes, d, lay.big_endian, lay.scale, &mut out);
                if let Some(w) = wide.as_deref_mut() {
                    w.extend(
                        crate::io::wide_integers(bytes, d, lay.big_endian).unwrap_or_default(),
                    );
                }
            }
        }
    }
    if lay.storage == Storage::Rgb24 {
        for c in rgb {
            out.extend_from_slice(&c);
        }
    }
    Ok(out)
}

fn decode(b: &[u8], d: DType, big: bool, scale: Option<(f64, f64)>, out: &mut Vec<f32>) {
    macro_rules! conv {
        ($t:ty) => {{
            const N: usize = std::mem::size_of::<$t>();
            let it = b.chunks_exact(N).map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                if big {
                    <$t>::from_be_bytes(a)
                } else {
                    <$t>::from_le_bytes(a)
                }
            });
            match scale {
                // nibabel scales in float64 (get_fdata), then we round once to f32.
                Some((s, i)) => out.extend(it.map(|v| (v as f64 * s + i) as f32)),
                None => out.extend(it.map(|v| v as f32)),
            }
        }};
    }
    match d {
        DType::U8 => conv!(u8),
        DType::I8 => conv!(i8),
        DType::U16 => conv!(u16),
        DType::I16 => conv!(i16),
        DType::U32 => conv!(u32),
        DType::I32 => conv!(i32),
        DType::U64 => conv!(u64),
        DType::I64 => conv!(i64),
        DType::F32 => conv!(f32),
        DType::F64 => conv!(f64),
    }
}
