//! Writing a `.nii` or `.nii.gz`: the save plan (which header, version, storage type and scaling
//! the output gets), the NIfTI-1 and NIfTI-2 header bytes, and the encoding of the voxels.

use std::io::Write;
use std::path::Path;

use ::nifti::{Endianness, NiftiHeader};
use flate2::Compression;
use flate2::write::GzEncoder;

use super::affine::{affine, world_from_voxel, xform_code};
use super::header::{HEADER_LEN, HEADER2_LEN, MAGIC2, Storage, Version, scaling};
use super::{CHUNK_BYTES, FORMAT};
use crate::core::volume::{DType, Nifti2Fields, Volume};
use crate::io::{IoError, SaveOptions, atomic_write};

/// Header plus the 4-byte extension flag: where a written file's voxels start.
const DATA_OFFSET: usize = 352;
/// Where a written NIfTI-2 file's voxels start.
const DATA2_OFFSET: usize = 544;
/// NIfTI-1 stores dimensions as signed 16-bit integers.
const MAX_DIM: usize = i16::MAX as usize;

/// NIFTI_XFORM_ALIGNED_ANAT, nibabel's code for an affine given by the user.
const XFORM_ALIGNED_ANAT: i16 = 2;
/// NIFTI_UNITS_MM | NIFTI_UNITS_SEC.
const UNITS_MM_SEC: u8 = 2 | 8;

/// What to write: the header, how the voxels are stored and the scaling to undo.
struct Plan {
    /// The text fields, and for NIfTI-1 every field.
    header: NiftiHeader,
    /// The numbers at full width (written as they are for NIfTI-2).
    wide: Nifti2Fields,
    version: Version,
    storage: Storage,
    scale: Option<(f64, f64)>,
}

/// Builds the output header: the input's header with every field kept (codes, sform, qform,
/// descrip, units, intent, cal_min/max, …) and dims, pixdim, datatype, bitpix, scaling and
/// vox_offset set for the data written; a fresh one (sform = `world_from_voxel`, code aligned)
/// for a volume without one. A volume read from a NIfTI-2 file is written as NIfTI-2 from its
/// 64-bit fields, and so is one with an axis longer than NIfTI-1's 32767; any other as NIfTI-1.
fn plan(vol: &Volume, opts: &SaveOptions) -> Result<Plan, String> {
    let ndim = vol.ndim();
    if !(2..=3).contains(&ndim) {
        return Err(format!(
            "a {ndim}D volume cannot be written (2D or 3D only)"
        ));
    }
    if vol.channels == 0 || vol.data.len() != vol.channels * vol.len_spatial() {
        return Err(format!(
            "{} values do not fill shape {:?} with {} channels",
            vol.data.len(),
            vol.shape,
            vol.channels
        ));
    }
    if let Some(&d) = vol
        .shape
        .iter()
        .chain([&vol.channels])
        .find(|&&d| d == 0 || i64::try_from(d).is_err())
    {
        return Err(if d == 0 {
            "an axis of length 0 cannot be written (NIfTI axes hold at least one voxel)".into()
        } else {
            format!(
                "axis length {d} does not fit NIfTI-2 (at most {})",
                i64::MAX
            )
        });
    }
    let src = vol.nifti_header.as_deref();
    let fresh = src.is_none();
    let mut h = src.cloned().unwrap_or_else(|| NiftiHeader {
        descrip: b"augscope".to_vec(),
        qform_code: 0,
        sform_code: XFORM_ALIGNED_ANAT,
        xyzt_units: UNITS_MM_SEC,
        ..NiftiHeader::default()
    });
    let src_nifti2 = src.is_some_and(|s| s.sizeof_hdr == HEADER2_LEN as i32);
    // The source's numbers at full width: its NIfTI-2 fields when the header is NIfTI-2's and
    // they were kept, else the NIfTI-1 header's widened.
    let mut w = match vol.nifti2.as_deref() {
        Some(w) if src_nifti2 => w.clone(),
        _ => Nifti2Fields::widen(&h, h.dim.map(|d| d as i64)),
    };
    let src_storage = src.and_then(|_| Storage::from_code(w.datatype).ok());
    let (storage, scale) = if opts.keep_dtype {
        if src_storage == Some(Storage::Rgb24) && vol.channels == 3 && vol.dtype == DType::U8 {
            (Storage::Rgb24, None)
        } else {
            let st = Storage::Scalar(vol.dtype);
            let kept = if src_storage == Some(st) {
                scaling(w.scl_slope, w.scl_inter).ok().flatten()
            } else {
                None
            };
            (st, kept)
        }
    } else {
        (Storage::Scalar(DType::F32), None)
    };
    // Channels are a 4th axis (RGB24 holds its three in one voxel). A 4D NIfTI needs a 3rd
    // axis, so a 2D multi-channel image is written as one slice: [1, y, x] x channels.
    let four_d = vol.channels > 1 && storage != Storage::Rgb24;
    let mut dim = [1i64; 8];
    let spatial: Vec<usize> = if four_d && ndim == 2 {
        vec![vol.shape[1], vol.shape[0], 1]
    } else {
        vol.shape.iter().rev().copied().collect()
    };
    dim[0] = (spatial.len() + four_d as usize) as i64;
    for (i, &s) in spatial.iter().enumerate() {
        dim[i + 1] = s as i64;
    }
    if four_d {
        dim[4] = vol.channels as i64;
    } else if ndim == 3 && vol.channels == 1 && src.is_some() && w.dim[0] >= 4 {
        // A 4D source of one volume, (x, y, z, 1) (what many pipelines write for a single
        // time point or channel), is written back with its 4th axis, as it was read.
        dim[0] = 4;
    }
    w.dim = dim;
    // NIfTI-1 dims are 16-bit: a longer axis needs NIfTI-2.
    let version = if src_nifti2 || dim.iter().any(|&d| d > MAX_DIM as i64) {
        Version::Two
    } else {
        Version::One
    };
    let spacing: Vec<f64> = vol.spacing_mm.iter().rev().copied().collect();
    for (i, &s) in spacing.iter().enumerate() {
        w.pixdim[i + 1] = s;
    }
    if fresh {
        w.pixdim[0] = 1.0;
        for p in &mut w.pixdim[spacing.len() + 1..] {
            *p = 1.0;
        }
    }
    w.vox_offset = version.data_offset() as i64;
    w.datatype = storage.code();
    w.bitpix = (storage.size() * 8) as i16;
    (w.scl_slope, w.scl_inter) = scale.unwrap_or((1.0, 0.0));
    h.sizeof_hdr = version.header_len() as i32;
    h.magic = match version {
        Version::One => *b"n+1\0",
        Version::Two => *b"n+2\0",
    };
    h.endianness = Endianness::Little;
    h.descrip.resize(80, 0);
    // The affine the file will hold, at the width it is written.
    let written_affine = |w: &Nifti2Fields, h: &mut NiftiHeader| match version {
        Version::One => {
            w.narrow_into(h);
            world_from_voxel(h)
        }
        Version::Two => affine(w, version),
    };
    // The header's own affine must still place the voxels where the volume says; if the
    // volume's affine was changed (or never came from this header), the sform carries it and
    // a qform that no longer agrees is switched off.
    let agrees = written_affine(&w, &mut h).is_ok_and(|m| same_affine(&m, &vol.world_from_voxel));
    if fresh || !agrees {
        let m = &vol.world_from_voxel;
        if m.iter().flatten().any(|v| !v.is_finite()) {
            return Err("the volume's affine holds NaN or infinite values".into());
        }
        for (row, m) in w.srow.iter_mut().zip(m) {
            row.copy_from_slice(m);
        }
        if !agrees {
            w.sform_code = match (xform_code(w.sform_code), xform_code(w.qform_code)) {
                (s, _) if s > 0 => s,
                (_, q) if q > 0 => q,
                _ => XFORM_ALIGNED_ANAT as i32,
            };
            w.qform_code = 0;
        }
    }
    w.narrow_into(&mut h);
    Ok(Plan {
        header: h,
        wide: w,
        version,
        storage,
        scale,
    })
}

fn same_affine(a: &[[f64; 4]; 4], b: &[[f64; 4]; 4]) -> bool {
    // Header fields are f32: allow for their rounding.
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .all(|(x, y)| (x - y).abs() <= 1e-5 * x.abs().max(y.abs()).max(1.0))
}

/// The 348 header bytes, little-endian.
fn header_bytes(h: &NiftiHeader) -> Vec<u8> {
    let mut b = Vec::with_capacity(DATA_OFFSET);
    let i16s = |b: &mut Vec<u8>, v: i16| b.extend_from_slice(&v.to_le_bytes());
    let f32s =
        |b: &mut Vec<u8>, v: &[f32]| v.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    b.extend_from_slice(&h.sizeof_hdr.to_le_bytes());
    b.extend_from_slice(&h.data_type);
    b.extend_from_slice(&h.db_name);
    b.extend_from_slice(&h.extents.to_le_bytes());
    i16s(&mut b, h.session_error);
    b.push(h.regular);
    b.push(h.dim_info);
    for d in h.dim {
        i16s(&mut b, d as i16);
    }
    f32s(&mut b, &[h.intent_p1, h.intent_p2, h.intent_p3]);
    i16s(&mut b, h.intent_code);
    i16s(&mut b, h.datatype);
    i16s(&mut b, h.bitpix);
    i16s(&mut b, h.slice_start);
    f32s(&mut b, &h.pixdim);
    f32s(&mut b, &[h.vox_offset, h.scl_slope, h.scl_inter]);
    i16s(&mut b, h.slice_end);
    b.push(h.slice_code);
    b.push(h.xyzt_units);
    f32s(&mut b, &[h.cal_max, h.cal_min, h.slice_duration, h.toffset]);
    b.extend_from_slice(&h.glmax.to_le_bytes());
    b.extend_from_slice(&h.glmin.to_le_bytes());
    let mut descrip = [0u8; 80];
    let n = h.descrip.len().min(80);
    descrip[..n].copy_from_slice(&h.descrip[..n]);
    b.extend_from_slice(&descrip);
    b.extend_from_slice(&h.aux_file);
    i16s(&mut b, h.qform_code);
    i16s(&mut b, h.sform_code);
    f32s(
        &mut b,
        &[
            h.quatern_b,
            h.quatern_c,
            h.quatern_d,
            h.quatern_x,
            h.quatern_y,
            h.quatern_z,
        ],
    );
    f32s(&mut b, &h.srow_x);
    f32s(&mut b, &h.srow_y);
    f32s(&mut b, &h.srow_z);
    b.extend_from_slice(&h.intent_name);
    b.extend_from_slice(&h.magic);
    debug_assert_eq!(b.len(), HEADER_LEN);
    b
}

/// The 540 header bytes of NIfTI-2, little-endian: the numbers from `w`, the text fields and
/// dim_info from `h`.
fn header2_bytes(h: &NiftiHeader, w: &Nifti2Fields) -> Vec<u8> {
    let mut b = Vec::with_capacity(DATA2_OFFSET);
    let f64s =
        |b: &mut Vec<u8>, v: &[f64]| v.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    let i64s =
        |b: &mut Vec<u8>, v: &[i64]| v.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    let i32s =
        |b: &mut Vec<u8>, v: &[i32]| v.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    b.extend_from_slice(&(HEADER2_LEN as i32).to_le_bytes());
    b.extend_from_slice(MAGIC2);
    b.extend_from_slice(&w.datatype.to_le_bytes());
    b.extend_from_slice(&w.bitpix.to_le_bytes());
    i64s(&mut b, &w.dim);
    f64s(&mut b, &w.intent_p);
    f64s(&mut b, &w.pixdim);
    i64s(&mut b, &[w.vox_offset]);
    f64s(
        &mut b,
        &[
            w.scl_slope,
            w.scl_inter,
            w.cal_max,
            w.cal_min,
            w.slice_duration,
            w.toffset,
        ],
    );
    i64s(&mut b, &[w.slice_start, w.slice_end]);
    let mut descrip = [0u8; 80];
    let n = h.descrip.len().min(80);
    descrip[..n].copy_from_slice(&h.descrip[..n]);
    b.extend_from_slice(&descrip);
    b.extend_from_slice(&h.aux_file);
    i32s(&mut b, &[w.qform_code, w.sform_code]);
    f64s(&mut b, &w.quatern);
    f64s(&mut b, &w.qoffset);
    for row in &w.srow {
        f64s(&mut b, row);
    }
    i32s(&mut b, &[w.slice_code, w.xyzt_units, w.intent_code]);
    b.extend_from_slice(&h.intent_name);
    b.push(h.dim_info);
    b.extend_from_slice(&[0u8; 15]);
    debug_assert_eq!(b.len(), HEADER2_LEN);
    b
}

/// Writes `.nii` or, when the name ends in `.gz`, `.nii.gz`, through a temporary file.
/// The input's header is kept field by field (so nibabel's `img.affine` and 3D Slicer place the
/// output where the input was). Voxels are float32 (`scl_slope` 1, `scl_inter` 0), or with
/// `keep_dtype` the volume's own type, rounded and clamped; if the input was scaled, raw values
/// `(v - inter) / slope` are written and the scaling kept, as nibabel does for a scaled header.
/// Several channels become a 4th axis (RGB24 again with `keep_dtype` if it was RGB24); a 2D
/// multi-channel image is written as one slice, `[1, y, x]`. The file is little-endian whatever
/// the input's byte order, and header extensions (between the header and vox_offset) are not
/// carried over. A volume read from NIfTI-2, or with an axis longer than 32767, is written as
/// NIfTI-2 (540-byte header, voxels from byte 544); any other as NIfTI-1.
/// If the volume's affine no longer matches the header's, the sform takes the volume's affine and
/// the qform is switched off (qform_code 0), so that every reader places the data alike.
pub fn write(path: &Path, vol: &Volume, opts: &SaveOptions) -> Result<(), IoError> {
    let p = plan(vol, opts).map_err(|why| IoError::write(FORMAT, why, path))?;
    let gz = path.to_string_lossy().to_ascii_lowercase().ends_with(".gz");
    atomic_write(path, FORMAT, |w| {
        if gz {
            // Level 1, as nibabel writes: 4.5x faster than level 6 on the MNI scan for a file
            // 20 % larger (a batch of .nii.gz was bound by the compression).
            let mut e = GzEncoder::new(w, Compression::new(1));
            write_body(&mut e, vol, &p)?;
            e.finish()?;
            Ok(())
        } else {
            write_body(w, vol, &p)
        }
    })
}

fn write_body(w: &mut impl Write, vol: &Volume, p: &Plan) -> std::io::Result<()> {
    match p.version {
        Version::One => w.write_all(&header_bytes(&p.header))?,
        Version::Two => w.write_all(&header2_bytes(&p.header, &p.wide))?,
    }
    w.write_all(&[0u8; 4])?; // no extensions
    let n = vol.len_spatial();
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK_BYTES + 8);
    let flush = |buf: &mut Vec<u8>, w: &mut dyn Write| -> std::io::Result<()> {
        w.write_all(buf)?;
        buf.clear();
        Ok(())
    };
    match p.storage {
        Storage::Rgb24 => {
            for i in 0..n {
                for c in 0..3 {
                    buf.push(DType::U8.quantize(vol.data[c * n + i]) as u8);
                }
                if buf.len() >= CHUNK_BYTES {
                    flush(&mut buf, w)?;
                }
            }
        }
        Storage::Scalar(d) => match &vol.label_values {
            // A label map of codes: its exact values (the table came from unscaled storage).
            Some(t) => {
                for chunk in vol.data.chunks(CHUNK_BYTES / 8) {
                    crate::io::encode_exact(&t.decode(chunk), d, &mut buf);
                    flush(&mut buf, w)?;
                }
            }
            None => {
                for chunk in vol.data.chunks(CHUNK_BYTES / 8) {
                    encode(chunk, d, p.scale, &mut buf);
                    flush(&mut buf, w)?;
                }
            }
        },
    }
    flush(&mut buf, w)
}

/// Little-endian `d` values of `v` (unscaled by `(v - inter) / slope` first), integers rounded
/// half away from zero and clamped as [`DType::quantize`] does, NaN → 0.
fn encode(values: &[f32], d: DType, scale: Option<(f64, f64)>, out: &mut Vec<u8>) {
    let raw = |v: f32| -> f64 {
        match scale {
            Some((s, i)) => (v as f64 - i) / s,
            None => v as f64,
        }
    };
    let int = |v: f32, lo: f64, hi: f64| -> f64 {
        let x = raw(v);
        if x.is_nan() {
            0.0
        } else {
            x.round().clamp(lo, hi)
        }
    };
    macro_rules! put {
        ($t:ty) => {
            for &v in values {
                let q = int(v, <$t>::MIN as f64, <$t>::MAX as f64) as $t;
                out.extend_from_slice(&q.to_le_bytes());
            }
        };
    }
    match d {
        DType::U8 => put!(u8),
        DType::I8 => put!(i8),
        DType::U16 => put!(u16),
        DType::I16 => put!(i16),
        DType::U32 => put!(u32),
        DType::I32 => put!(i32),
        DType::U64 => put!(u64),
        DType::I64 => put!(i64),
        DType::F32 => {
            for &v in values {
                let x = if scale.is_some() { raw(v) as f32 } else { v };
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        DType::F64 => {
            for &v in values {
                out.extend_from_slice(&raw(v).to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::nifti::header::{parse_header, parse_header2};

    #[test]
    fn header_bytes_round_trip() {
        // The crate's default header has the .hdr/.img magic; a .nii needs "n+1".
        let h = NiftiHeader {
            descrip: b"abc".to_vec(),
            magic: *b"n+1\0",
            ..NiftiHeader::default()
        };
        let b = header_bytes(&h);
        assert_eq!(b.len(), HEADER_LEN);
        let (p, _, big) = parse_header(&b).unwrap();
        assert!(!big);
        assert_eq!(&p.descrip[..3], b"abc");
        assert_eq!(p.vox_offset, h.vox_offset);
    }

    #[test]
    fn header2_bytes_round_trip() {
        let h = NiftiHeader {
            descrip: b"wide".to_vec(),
            intent_name: *b"name\0\0\0\0\0\0\0\0\0\0\0\0",
            dim_info: 57,
            ..NiftiHeader::default()
        };
        let mut w = Nifti2Fields::widen(&h, [3, 70000, 2, 1, 1, 1, 1, 1]);
        w.srow[0] = [0.1, 1.0 / 3.0, -7.25, 1e300];
        w.scl_slope = 0.1;
        w.vox_offset = 1 << 40;
        w.intent_code = 1 << 20;
        let b = header2_bytes(&h, &w);
        assert_eq!(b.len(), HEADER2_LEN);
        let p = parse_header2(&b).unwrap();
        assert!(!p.big);
        assert_eq!(p.wide, w);
        assert_eq!(&p.header.descrip[..4], b"wide");
        assert_eq!(
            (p.header.intent_name, p.header.dim_info),
            (h.intent_name, 57)
        );
        // Narrowed: dims saturate, an out-of-range code stays out of range.
        assert_eq!(p.header.dim[1], u16::MAX);
        assert_eq!(p.header.intent_code, i16::MAX);
    }
}
