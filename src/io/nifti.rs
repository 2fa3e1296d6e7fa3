//! NIfTI-1 and NIfTI-2 single-file `.nii` / `.nii.gz` read and write.
//!
//! Arrays are `[z, y, x]` (NIfTI `(k, j, i)`), 2D images `[y, x]`; the 4th NIfTI axis and RGB24
//! colour are channels (DESIGN §2). Because NIfTI stores `i` fastest, the file order already is C
//! order for `[z, y, x]` (and channel-major for `[t, z, y, x]`): no transpose is needed.
//!
//! The header (348 bytes for NIfTI-1, 540 for NIfTI-2) is parsed and validated here, by hand, in
//! either byte order, before a single data byte is read: the `nifti` crate allocates whatever a
//! header declares and panics on some hostile headers, so only its [`NiftiHeader`] type is used,
//! to carry every header field from a read to a write. NIfTI-2's 64-bit dims, offsets and floats
//! do not fit that type: a NIfTI-2 volume keeps them in `Volume::nifti2` ([`Nifti2Fields`]) and is
//! written back as NIfTI-2. What the reader returns reproduces nibabel (`nib.load(p)`):
//! `get_fdata()` for the values (scl_slope/scl_inter applied, slope 0 or non-finite meaning no
//! scaling), `img.affine` for `world_from_voxel` and `header.get_zooms()` for the spacing,
//! including the fixes nibabel applies silently on load (qfac not ±1 → 1, pixdim ≤ 0 → |pixdim| or
//! 1, unknown xform codes → 0).

use std::fs::File;
use std::io::{BufReader, Read, Seek, Write};
use std::path::Path;

use ::nifti::{Endianness, NiftiHeader};
use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;

use super::{IoError, SaveOptions, atomic_write};
use crate::core::volume::{DType, Volume};

const FORMAT: &str = "NIfTI";
/// `sizeof_hdr` of NIfTI-1.
const HEADER_LEN: usize = 348;
/// Header plus the 4-byte extension flag: where a written file's voxels start.
const DATA_OFFSET: usize = 352;
/// `sizeof_hdr` of NIfTI-2.
const HEADER2_LEN: usize = 540;
/// Where a written NIfTI-2 file's voxels start.
const DATA2_OFFSET: usize = 544;
/// The magic of a single-file NIfTI-2 and the four bytes after it, which catch a file altered by
/// a text-mode transfer.
const MAGIC2: &[u8; 8] = b"n+2\0\r\n\x1a\n";
/// NIfTI-1 stores dimensions as signed 16-bit integers.
const MAX_DIM: usize = i16::MAX as usize;
/// Deflate cannot expand data by more than about 1032:1, which bounds what a `.nii.gz` of a
/// given size can hold before a single byte is decompressed.
const MAX_DEFLATE_RATIO: u64 = 1032;
/// Bytes decoded per read while streaming the data.
const CHUNK_BYTES: usize = 1 << 20;

/// NIFTI_XFORM_ALIGNED_ANAT, nibabel's code for an affine given by the user.
const XFORM_ALIGNED_ANAT: i16 = 2;
/// NIFTI_UNITS_MM | NIFTI_UNITS_SEC.
const UNITS_MM_SEC: u8 = 2 | 8;

/// How voxels are stored on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Storage {
    Scalar(DType),
    /// NIFTI_TYPE_RGB24: three interleaved u8 per voxel.
    Rgb24,
}

impl Storage {
    fn from_code(code: i16) -> Result<Storage, String> {
        Ok(match code {
            2 => Storage::Scalar(DType::U8),
            4 => Storage::Scalar(DType::I16),
            8 => Storage::Scalar(DType::I32),
            16 => Storage::Scalar(DType::F32),
            64 => Storage::Scalar(DType::F64),
            128 => Storage::Rgb24,
            256 => Storage::Scalar(DType::I8),
            512 => Storage::Scalar(DType::U16),
            768 => Storage::Scalar(DType::U32),
            1024 => Storage::Scalar(DType::I64),
            1280 => Storage::Scalar(DType::U64),
            other => {
                let name = match other {
                    0 => "unknown (0)",
                    1 => "binary (1)",
                    32 => "complex64 (32)",
                    1536 => "float128 (1536)",
                    1792 => "complex128 (1792)",
                    2048 => "complex256 (2048)",
                    2304 => "RGBA32 (2304)",
                    _ => return Err(format!("unknown datatype code {other}")),
                };
                return Err(format!("unsupported datatype {name}"));
            }
        })
    }

    fn code(self) -> i16 {
        match self {
            Storage::Rgb24 => 128,
            Storage::Scalar(d) => match d {
                DType::U8 => 2,
                DType::I16 => 4,
                DType::I32 => 8,
                DType::F32 => 16,
                DType::F64 => 64,
                DType::I8 => 256,
                DType::U16 => 512,
                DType::U32 => 768,
                DType::I64 => 1024,
                DType::U64 => 1280,
            },
        }
    }

    /// Bytes per voxel.
    fn size(self) -> usize {
        match self {
            Storage::Rgb24 => 3,
            Storage::Scalar(d) => match d {
                DType::U8 | DType::I8 => 1,
                DType::U16 | DType::I16 => 2,
                DType::U32 | DType::I32 | DType::F32 => 4,
                DType::U64 | DType::I64 | DType::F64 => 8,
            },
        }
    }

    fn dtype(self) -> DType {
        match self {
            Storage::Rgb24 => DType::U8,
            Storage::Scalar(d) => d,
        }
    }
}

/// The header version of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    /// NIfTI-1: a 348-byte header, 16-bit dims, 32-bit floats.
    One,
    /// NIfTI-2: a 540-byte header, 64-bit dims and offsets, 64-bit floats.
    Two,
}

impl Version {
    /// `sizeof_hdr`.
    fn header_len(self) -> usize {
        match self {
            Version::One => HEADER_LEN,
            Version::Two => HEADER2_LEN,
        }
    }

    /// Header plus the 4-byte extension flag: where a written file's voxels start.
    fn data_offset(self) -> usize {
        self.header_len() + 4
    }

    /// nibabel's `quaternion_threshold`: three epsilons of the header's float type.
    fn quaternion_threshold(self) -> f64 {
        match self {
            Version::One => 3.0 * f32::EPSILON as f64,
            Version::Two => 3.0 * f64::EPSILON,
        }
    }
}

pub use crate::core::volume::Nifti2Fields;

impl Nifti2Fields {
    /// The numbers of a NIfTI-1 header, widened (exactly). `dim` is passed separately because
    /// NIfTI's `dim` is signed and `NiftiHeader::dim` is not.
    fn widen(h: &NiftiHeader, dim: [i64; 8]) -> Nifti2Fields {
        let f = |v: f32| v as f64;
        Nifti2Fields {
            datatype: h.datatype,
            bitpix: h.bitpix,
            dim,
            intent_p: [f(h.intent_p1), f(h.intent_p2), f(h.intent_p3)],
            pixdim: h.pixdim.map(f),
            // Only a record: the reader checks NIfTI-1's float vox_offset itself.
            vox_offset: h.vox_offset as i64,
            scl_slope: f(h.scl_slope),
            scl_inter: f(h.scl_inter),
            cal_max: f(h.cal_max),
            cal_min: f(h.cal_min),
            slice_duration: f(h.slice_duration),
            toffset: f(h.toffset),
            slice_start: h.slice_start as i64,
            slice_end: h.slice_end as i64,
            qform_code: h.qform_code as i32,
            sform_code: h.sform_code as i32,
            quatern: [f(h.quatern_b), f(h.quatern_c), f(h.quatern_d)],
            qoffset: [f(h.quatern_x), f(h.quatern_y), f(h.quatern_z)],
            srow: [h.srow_x, h.srow_y, h.srow_z].map(|r| r.map(f)),
            slice_code: h.slice_code as i32,
            xyzt_units: h.xyzt_units as i32,
            intent_code: h.intent_code as i32,
        }
    }

    /// Stores these numbers in a NIfTI-1 header: floats rounded to f32, integers saturated to
    /// the narrower type (an out-of-range code stays out of range, so it stays invalid).
    fn narrow_into(&self, h: &mut NiftiHeader) {
        let sat16 = |v: i64| v.clamp(i16::MIN as i64, i16::MAX as i64) as i16;
        let sat8 = |v: i32| v.clamp(0, u8::MAX as i32) as u8;
        let f = |v: f64| v as f32;
        h.datatype = self.datatype;
        h.bitpix = self.bitpix;
        h.dim = self.dim.map(|d| d.clamp(0, u16::MAX as i64) as u16);
        [h.intent_p1, h.intent_p2, h.intent_p3] = self.intent_p.map(f);
        h.pixdim = self.pixdim.map(f);
        h.vox_offset = self.vox_offset as f32;
        h.scl_slope = f(self.scl_slope);
        h.scl_inter = f(self.scl_inter);
        h.cal_max = f(self.cal_max);
        h.cal_min = f(self.cal_min);
        h.slice_duration = f(self.slice_duration);
        h.toffset = f(self.toffset);
        h.slice_start = sat16(self.slice_start);
        h.slice_end = sat16(self.slice_end);
        h.qform_code = sat16(self.qform_code as i64);
        h.sform_code = sat16(self.sform_code as i64);
        [h.quatern_b, h.quatern_c, h.quatern_d] = self.quatern.map(f);
        [h.quatern_x, h.quatern_y, h.quatern_z] = self.qoffset.map(f);
        [h.srow_x, h.srow_y, h.srow_z] = self.srow.map(|r| r.map(f));
        h.slice_code = sat8(self.slice_code);
        h.xyzt_units = sat8(self.xyzt_units);
        h.intent_code = sat16(self.intent_code as i64);
    }
}

/// A validated header: what the data will look like, and where it lies.
struct Layout {
    header: NiftiHeader,
    wide: Nifti2Fields,
    version: Version,
    big_endian: bool,
    storage: Storage,
    /// Spatial shape in array order.
    shape: Vec<usize>,
    /// Channels in the file: `dim[4]` for 4D scalar data, 3 for RGB24.
    channels: usize,
    /// Voxels per channel.
    count: usize,
    /// Byte offset of the data.
    offset: u64,
    /// Bytes of data.
    nbytes: u64,
    /// `(slope, inter)` when the values are scaled.
    scale: Option<(f64, f64)>,
}

/// A parsed header of either version, before [`layout`] validates it.
struct Parsed {
    header: NiftiHeader,
    wide: Nifti2Fields,
    version: Version,
    big: bool,
}

/// Reads fields of a raw header in its byte order.
struct Fields<'a> {
    b: &'a [u8],
    big: bool,
}

macro_rules! field {
    ($name:ident, $t:ty) => {
        fn $name(&self, off: usize) -> $t {
            let a = self.arr::<{ std::mem::size_of::<$t>() }>(off);
            if self.big {
                <$t>::from_be_bytes(a)
            } else {
                <$t>::from_le_bytes(a)
            }
        }
    };
}

impl Fields<'_> {
    fn arr<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.b[off..off + N]);
        a
    }
    field!(i16, i16);
    field!(i32, i32);
    field!(i64, i64);
    field!(f32, f32);
    field!(f64, f64);
    fn f32s<const N: usize>(&self, off: usize) -> [f32; N] {
        std::array::from_fn(|i| self.f32(off + 4 * i))
    }
    fn f64s<const N: usize>(&self, off: usize) -> [f64; N] {
        std::array::from_fn(|i| self.f64(off + 8 * i))
    }
}

/// The header version and byte order, from `sizeof_hdr` (the first 4 bytes).
fn sniff(b: &[u8]) -> Result<(Version, bool), String> {
    if b.len() < 4 {
        return Err(format!(
            "truncated header ({} of {HEADER_LEN} bytes)",
            b.len()
        ));
    }
    let le = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let be = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Ok(match (le, be) {
        (348, _) => (Version::One, false),
        (_, 348) => (Version::One, true),
        (540, _) => (Version::Two, false),
        (_, 540) => (Version::Two, true),
        _ => {
            return Err(format!(
                "not a NIfTI-1 or NIfTI-2 file (sizeof_hdr is {le}, expected 348 or 540)"
            ));
        }
    })
}

/// Parses a header of either version; `b` holds at least the whole header when the file does.
fn parse_any(b: &[u8]) -> Result<Parsed, String> {
    match sniff(b)?.0 {
        Version::One => {
            let (header, dim, big) = parse_header(b)?;
            let wide = Nifti2Fields::widen(&header, dim.map(|d| d as i64));
            Ok(Parsed {
                header,
                wide,
                version: Version::One,
                big,
            })
        }
        Version::Two => parse_header2(b),
    }
}

/// Parses the 348 header bytes (either byte order) into the `nifti` crate's header type. Checks
/// only what is needed to know the byte order and the file kind; [`layout`] validates the rest.
/// `dim` is returned separately because NIfTI's `dim` is signed and `NiftiHeader::dim` is not.
fn parse_header(b: &[u8]) -> Result<(NiftiHeader, [i16; 8], bool), String> {
    if b.len() < HEADER_LEN {
        return Err(format!(
            "truncated header ({} of {HEADER_LEN} bytes)",
            b.len()
        ));
    }
    let big = match sniff(b)? {
        (Version::One, big) => big,
        (Version::Two, _) => return Err("a NIfTI-2 header where NIfTI-1 was expected".into()),
    };
    let f = Fields { b, big };
    let magic = f.arr::<4>(344);
    match &magic {
        b"n+1\0" => {}
        b"ni1\0" => {
            return Err(
                "this is the header of a .hdr/.img pair; only single-file .nii is supported".into(),
            );
        }
        _ => {
            return Err(format!(
                "bad magic {:?} (expected \"n+1\")",
                String::from_utf8_lossy(&magic)
            ));
        }
    }
    let dim: [i16; 8] = std::array::from_fn(|i| f.i16(40 + 2 * i));
    let header = NiftiHeader {
        sizeof_hdr: 348,
        data_type: f.arr(4),
        db_name: f.arr(14),
        extents: f.i32(32),
        session_error: f.i16(36),
        regular: b[38],
        dim_info: b[39],
        dim: dim.map(|d| d.max(0) as u16),
        intent_p1: f.f32(56),
        intent_p2: f.f32(60),
        intent_p3: f.f32(64),
        intent_code: f.i16(68),
        datatype: f.i16(70),
        bitpix: f.i16(72),
        slice_start: f.i16(74),
        pixdim: f.f32s(76),
        vox_offset: f.f32(108),
        scl_slope: f.f32(112),
        scl_inter: f.f32(116),
        slice_end: f.i16(120),
        slice_code: b[122],
        xyzt_units: b[123],
        cal_max: f.f32(124),
        cal_min: f.f32(128),
        slice_duration: f.f32(132),
        toffset: f.f32(136),
        glmax: f.i32(140),
        glmin: f.i32(144),
        descrip: b[148..228].to_vec(),
        aux_file: f.arr(228),
        qform_code: f.i16(252),
        sform_code: f.i16(254),
        quatern_b: f.f32(256),
        quatern_c: f.f32(260),
        quatern_d: f.f32(264),
        quatern_x: f.f32(268),
        quatern_y: f.f32(272),
        quatern_z: f.f32(276),
        srow_x: f.f32s(280),
        srow_y: f.f32s(296),
        srow_z: f.f32s(312),
        intent_name: f.arr(328),
        magic,
        endianness: if big {
            Endianness::Big
        } else {
            Endianness::Little
        },
    };
    Ok((header, dim, big))
}

/// Parses the 540 bytes of a NIfTI-2 header (either byte order): the wide fields as they are,
/// and a [`NiftiHeader`] holding them narrowed (`sizeof_hdr` 540, magic `n+2`, the fields NIfTI-2
/// dropped left at 0), which marks the volume as NIfTI-2 and keeps its text fields.
fn parse_header2(b: &[u8]) -> Result<Parsed, String> {
    if b.len() < HEADER2_LEN {
        return Err(format!(
            "truncated NIfTI-2 header ({} of {HEADER2_LEN} bytes)",
            b.len()
        ));
    }
    let big = match sniff(b)? {
        (Version::Two, big) => big,
        (Version::One, _) => return Err("a NIfTI-1 header where NIfTI-2 was expected".into()),
    };
    let f = Fields { b, big };
    let magic = f.arr::<4>(4);
    match &magic {
        b"n+2\0" => {}
        b"ni2\0" => {
            return Err(
                "this is the header of a NIfTI-2 .hdr/.img pair; only single-file .nii is \
                 supported"
                    .into(),
            );
        }
        _ => {
            return Err(format!(
                "bad NIfTI-2 magic {:?} (expected \"n+2\")",
                String::from_utf8_lossy(&magic)
            ));
        }
    }
    // The 4 bytes after the magic catch a file altered by a text-mode transfer; all zero is
    // what some writers leave (nibabel accepts both).
    let eol = f.arr::<4>(8);
    if eol != MAGIC2[4..] && eol != [0; 4] {
        return Err(format!(
            "NIfTI-2 end-of-line check bytes are {eol:?}, not [13, 10, 26, 10]: the file was \
             altered by a text-mode transfer"
        ));
    }
    let wide = Nifti2Fields {
        datatype: f.i16(12),
        bitpix: f.i16(14),
        dim: std::array::from_fn(|i| f.i64(16 + 8 * i)),
        intent_p: f.f64s(80),
        pixdim: f.f64s(104),
        vox_offset: f.i64(168),
        scl_slope: f.f64(176),
        scl_inter: f.f64(184),
        cal_max: f.f64(192),
        cal_min: f.f64(200),
        slice_duration: f.f64(208),
        toffset: f.f64(216),
        slice_start: f.i64(224),
        slice_end: f.i64(232),
        qform_code: f.i32(344),
        sform_code: f.i32(348),
        quatern: f.f64s(352),
        qoffset: f.f64s(376),
        srow: [f.f64s(400), f.f64s(432), f.f64s(464)],
        slice_code: f.i32(496),
        xyzt_units: f.i32(500),
        intent_code: f.i32(504),
    };
    let mut header = NiftiHeader {
        sizeof_hdr: HEADER2_LEN as i32,
        dim_info: b[524],
        descrip: b[240..320].to_vec(),
        aux_file: f.arr(320),
        intent_name: f.arr(508),
        magic,
        endianness: if big {
            Endianness::Big
        } else {
            Endianness::Little
        },
        ..NiftiHeader::default()
    };
    wide.narrow_into(&mut header);
    Ok(Parsed {
        header,
        wide,
        version: Version::Two,
        big,
    })
}

/// Checks a parsed header and works out shape, type, offset and size. `file_len` is the size of
/// the (uncompressed) file when known.
fn layout(p: Parsed, file_len: Option<u64>) -> Result<Layout, String> {
    let Parsed {
        header,
        wide,
        version,
        big,
    } = p;
    let dim = wide.dim;
    let ndim_declared = dim[0];
    if !(1..=7).contains(&ndim_declared) {
        return Err(format!(
            "dim[0] = {ndim_declared} is not a number of dimensions (1 to 7)"
        ));
    }
    let declared = &dim[1..=ndim_declared as usize];
    if let Some(i) = declared.iter().position(|&d| d < 0) {
        return Err(format!("dim[{}] = {} is negative", i + 1, declared[i]));
    }
    if let Some(i) = declared.iter().position(|&d| d == 0) {
        return Err(format!("dim[{}] is 0 (an empty axis)", i + 1));
    }
    // Trailing length-1 axes beyond the 4th carry no data (nibabel keeps them as singletons).
    let mut ndim = ndim_declared as usize;
    while ndim > 4 && dim[ndim] == 1 {
        ndim -= 1;
    }
    if ndim > 4 {
        return Err(format!(
            "{ndim}D data (dim = {:?}) is not supported (at most 4D)",
            declared
        ));
    }
    if ndim == 1 {
        return Err(format!("1D data (dim[1] = {}) is not an image", dim[1]));
    }
    let spatial = ndim.min(3);
    if let Some(i) = (1..=spatial).find(|&i| !wide.pixdim[i].is_finite()) {
        return Err(format!(
            "pixdim[{i}] = {} is not a voxel size",
            wide.pixdim[i]
        ));
    }
    let storage = Storage::from_code(wide.datatype)?;
    let too_large = || format!("dim {declared:?} is too large for this machine");
    // Positive i64 dims; on a 32-bit machine they may not fit usize.
    let d = |i: usize| usize::try_from(dim[i]).map_err(|_| too_large());
    let shape: Vec<usize> = if ndim == 2 {
        vec![d(2)?, d(1)?]
    } else {
        vec![d(3)?, d(2)?, d(1)?]
    };
    let t = if ndim == 4 { d(4)? } else { 1 };
    if storage == Storage::Rgb24 && t > 1 {
        return Err(format!(
            "RGB24 data with a 4th dimension ({t}) is not supported"
        ));
    }
    let channels = if storage == Storage::Rgb24 { 3 } else { t };
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(too_large)?;
    let nbytes = (count as u64)
        .checked_mul(t as u64)
        .and_then(|n| n.checked_mul(storage.size() as u64))
        .ok_or_else(|| format!("dim {declared:?} overflows"))?;
    let min_offset = version.data_offset() as u64;
    // Some writers leave vox_offset at 0; the data of a single file then starts after the
    // header and extension flag (nifti_clib does the same).
    let offset = match version {
        Version::One => {
            let vox = header.vox_offset;
            if !vox.is_finite() || vox < 0.0 {
                return Err(format!("vox_offset {vox} is not a byte offset"));
            }
            if vox == 0.0 { min_offset } else { vox as u64 }
        }
        Version::Two => match u64::try_from(wide.vox_offset) {
            Err(_) => {
                return Err(format!(
                    "vox_offset {} is not a byte offset",
                    wide.vox_offset
                ));
            }
            Ok(0) => min_offset,
            Ok(v) => v,
        },
    };
    if offset < min_offset {
        let vox = match version {
            Version::One => header.vox_offset.to_string(),
            Version::Two => wide.vox_offset.to_string(),
        };
        return Err(format!(
            "vox_offset {vox} lies inside the header (a {} .nii needs at least {min_offset})",
            match version {
                Version::One => "NIfTI-1",
                Version::Two => "NIfTI-2",
            }
        ));
    }
    let end = offset
        .checked_add(nbytes)
        .ok_or_else(|| format!("dim {declared:?} overflows"))?;
    if let Some(len) = file_len {
        if offset > len {
            return Err(format!(
                "vox_offset {offset} is beyond the end of the file ({len} bytes)"
            ));
        }
        if end > len {
            return Err(format!(
                "truncated data: dim {declared:?} of {} needs {nbytes} bytes from offset {offset}, \
                 the file has {} after it",
                storage_name(storage),
                len - offset
            ));
        }
    }
    if usize::try_from(nbytes).is_err()
        || count
            .checked_mul(channels)
            .and_then(|n| n.checked_mul(4))
            .is_none()
    {
        return Err(too_large());
    }
    let scale = scaling(wide.scl_slope, wide.scl_inter)?;
    Ok(Layout {
        header,
        wide,
        version,
        big_endian: big,
        storage,
        shape,
        channels,
        count,
        offset,
        nbytes,
        scale,
    })
}

fn storage_name(s: Storage) -> &'static str {
    match s {
        Storage::Rgb24 => "RGB24",
        Storage::Scalar(d) => d.name(),
    }
}

/// nibabel's `Nifti1Header.get_slope_inter`: slope 0 or non-finite means no scaling, a
/// non-finite intercept with a valid slope is an error. `(1, 0)` is returned as `None`.
fn scaling(slope: f64, inter: f64) -> Result<Option<(f64, f64)>, String> {
    if slope == 0.0 || !slope.is_finite() {
        return Ok(None);
    }
    if !inter.is_finite() {
        return Err(format!(
            "valid scl_slope {slope} but invalid scl_inter {inter}"
        ));
    }
    Ok((slope != 1.0 || inter != 0.0).then_some((slope, inter)))
}

/// The spatial pixdims as nibabel's header check fixes them on load: 0 → 1, negative → |p|.
fn fixed_pixdim(w: &Nifti2Fields) -> [f64; 3] {
    std::array::from_fn(|i| {
        let p = w.pixdim[i + 1];
        if p == 0.0 { 1.0 } else { p.abs() }
    })
}

/// A valid NIFTI_XFORM code (1..=4), else 0, as nibabel's `_chk_xform_code` fixes it.
fn xform_code(c: i32) -> i32 {
    if (0..=4).contains(&c) { c } else { 0 }
}

/// `world_from_voxel` for NIfTI voxel indices `(i, j, k)`, the same matrix as nibabel's
/// `img.affine` (`Nifti1Header.get_best_affine`): the sform if `sform_code > 0`, else the qform
/// (`quat2mat(fillpositive(b, c, d)) · diag(pixdim[1], pixdim[2], qfac · pixdim[3])` plus the
/// qoffsets) if `qform_code > 0`, else `get_base_affine`: `diag(-pixdim[1], pixdim[2],
/// pixdim[3])` centred on the middle voxel (`shape_zoom_affine` with the x flip). Note that this
/// last case is nibabel's, not NIfTI method 1's `diag(pixdim)` at the corner.
pub fn world_from_voxel(h: &NiftiHeader) -> Result<[[f64; 4]; 4], String> {
    affine(
        &Nifti2Fields::widen(h, h.dim.map(|d| d as i64)),
        Version::One,
    )
}

/// [`world_from_voxel`] of the wide fields, in f64 throughout; `version` sets the threshold
/// below which the quaternion's `w` is taken as 0 (nibabel's, by the header's float type).
fn affine(h: &Nifti2Fields, version: Version) -> Result<[[f64; 4]; 4], String> {
    let mut m = crate::core::volume::identity4();
    if xform_code(h.sform_code) > 0 {
        for (row, s) in m.iter_mut().zip(h.srow) {
            row.copy_from_slice(&s);
        }
    } else if xform_code(h.qform_code) > 0 {
        let [b, c, d] = h.quatern;
        // fillpositive with nibabel's threshold.
        let w2 = 1.0 - (b * b + c * c + d * d);
        let a = if w2.abs() < version.quaternion_threshold() {
            0.0
        } else if w2 < 0.0 || w2.is_nan() {
            return Err(format!(
                "qform quaternion ({b}, {c}, {d}) is not a unit quaternion"
            ));
        } else {
            w2.sqrt()
        };
        let r = quat_to_mat(a, b, c, d);
        let qfac = if h.pixdim[0] == -1.0 { -1.0 } else { 1.0 };
        let mut zoom = fixed_pixdim(h);
        zoom[2] *= qfac;
        for i in 0..3 {
            for j in 0..3 {
                m[i][j] = r[i][j] * zoom[j];
            }
        }
        for (i, o) in h.qoffset.iter().enumerate() {
            m[i][3] = *o;
        }
    } else {
        let ndim = h.dim[0].clamp(1, 3) as usize;
        let zoom = fixed_pixdim(h);
        for i in 0..ndim {
            let z = if i == 0 { -zoom[0] } else { zoom[i] };
            let origin = (h.dim[i + 1] as f64 - 1.0) / 2.0;
            m[i][i] = z;
            m[i][3] = -origin * z;
        }
    }
    if m.iter().flatten().any(|v| !v.is_finite()) {
        return Err("the affine (sform or qform) holds NaN or infinite values".into());
    }
    Ok(m)
}

/// nibabel's `quaternions.quat2mat`.
fn quat_to_mat(w: f64, x: f64, y: f64, z: f64) -> [[f64; 3]; 3] {
    let nq = w * w + x * x + y * y + z * z;
    if nq < f64::EPSILON {
        return [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    }
    let s = 2.0 / nq;
    let (xs, ys, zs) = (x * s, y * s, z * s);
    let (wx, wy, wz) = (w * xs, w * ys, w * zs);
    let (xx, xy, xz) = (x * xs, x * ys, x * zs);
    let (yy, yz, zz) = (y * ys, y * zs, z * zs);
    [
        [1.0 - (yy + zz), xy - wz, xz + wy],
        [xy + wz, 1.0 - (xx + zz), yz - wx],
        [xz - wy, yz + wx, 1.0 - (xx + yy)],
    ]
}

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
    let data = read_data(&mut r, &lay, gz.then_some(file_len)).map_err(|e| match e {
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
    Ok(Volume {
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
    })
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
fn read_data(r: &mut impl Read, lay: &Layout, gz_len: Option<u64>) -> Result<Vec<f32>, DataError> {
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
            Storage::Scalar(d) => decode(bytes, d, lay.big_endian, lay.scale, &mut out),
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
        Storage::Scalar(d) => {
            for chunk in vol.data.chunks(CHUNK_BYTES / 8) {
                encode(chunk, d, p.scale, &mut buf);
                flush(&mut buf, w)?;
            }
        }
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

    #[test]
    fn quaternion_of_identity_is_identity() {
        let r = quat_to_mat(1.0, 0.0, 0.0, 0.0);
        assert_eq!(r, [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]);
        // nibabel: quat2mat([0, 1, 0, 0]) == diag(1, -1, -1)
        let r = quat_to_mat(0.0, 1.0, 0.0, 0.0);
        assert_eq!(r, [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]]);
    }

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
