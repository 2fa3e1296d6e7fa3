//! The NIfTI-1 and NIfTI-2 header: sniffing the version and byte order, parsing either header by
//! hand, and validating it into a [`Layout`] (shape, storage type, data offset and size, scaling)
//! before any data is read.

use ::nifti::{Endianness, NiftiHeader};

use crate::core::volume::{DType, Nifti2Fields};

/// `sizeof_hdr` of NIfTI-1.
pub(super) const HEADER_LEN: usize = 348;
/// `sizeof_hdr` of NIfTI-2.
pub(super) const HEADER2_LEN: usize = 540;
/// The magic of a single-file NIfTI-2 and the four bytes after it, which catch a file altered by
/// a text-mode transfer.
pub(super) const MAGIC2: &[u8; 8] = b"n+2\0\r\n\x1a\n";

/// How voxels are stored on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Storage {
    Scalar(DType),
    /// NIFTI_TYPE_RGB24: three interleaved u8 per voxel.
    Rgb24,
}

impl Storage {
    pub(super) fn from_code(code: i16) -> Result<Storage, String> {
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

    pub(super) fn code(self) -> i16 {
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
    pub(super) fn size(self) -> usize {
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

    pub(super) fn dtype(self) -> DType {
        match self {
            Storage::Rgb24 => DType::U8,
            Storage::Scalar(d) => d,
        }
    }
}

/// The header version of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Version {
    /// NIfTI-1: a 348-byte header, 16-bit dims, 32-bit floats.
    One,
    /// NIfTI-2: a 540-byte header, 64-bit dims and offsets, 64-bit floats.
    Two,
}

impl Version {
    /// `sizeof_hdr`.
    pub(super) fn header_len(self) -> usize {
        match self {
            Version::One => HEADER_LEN,
            Version::Two => HEADER2_LEN,
        }
    }

    /// Header plus the 4-byte extension flag: where a written file's voxels start.
    pub(super) fn data_offset(self) -> usize {
        self.header_len() + 4
    }

    /// nibabel's `quaternion_threshold`: three epsilons of the header's float type.
    pub(super) fn quaternion_threshold(self) -> f64 {
        match self {
            Version::One => 3.0 * f32::EPSILON as f64,
            Version::Two => 3.0 * f64::EPSILON,
        }
    }
}

impl Nifti2Fields {
    /// The numbers of a NIfTI-1 header, widened (exactly). `dim` is passed separately because
    /// NIfTI's `dim` is signed and `NiftiHeader::dim` is not.
    pub(super) fn widen(h: &NiftiHeader, dim: [i64; 8]) -> Nifti2Fields {
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
    pub(super) fn narrow_into(&self, h: &mut NiftiHeader) {
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
pub(super) struct Layout {
    pub(super) header: NiftiHeader,
    pub(super) wide: Nifti2Fields,
    pub(super) version: Version,
    pub(super) big_endian: bool,
    pub(super) storage: Storage,
    /// Spatial shape in array order.
    pub(super) shape: Vec<usize>,
    /// Channels in the file: `dim[4]` for 4D scalar data, 3 for RGB24.
    pub(super) channels: usize,
    /// Voxels per channel.
    pub(super) count: usize,
    /// Byte offset of the data.
    pub(super) offset: u64,
    /// Bytes of data.
    pub(super) nbytes: u64,
    /// `(slope, inter)` when the values are scaled.
    pub(super) scale: Option<(f64, f64)>,
}

/// A parsed header of either version, before [`layout`] validates it.
pub(super) struct Parsed {
    pub(super) header: NiftiHeader,
    pub(super) wide: Nifti2Fields,
    pub(super) version: Version,
    pub(super) big: bool,
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
pub(super) fn sniff(b: &[u8]) -> Result<(Version, bool), String> {
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
pub(super) fn parse_any(b: &[u8]) -> Result<Parsed, String> {
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
pub(super) fn parse_header(b: &[u8]) -> Result<(NiftiHeader, [i16; 8], bool), String> {
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
pub(super) fn parse_header2(b: &[u8]) -> Result<Parsed, String> {
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
pub(super) fn layout(p: Parsed, file_len: Option<u64>) -> Result<Layout, String> {
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

pub(super) fn storage_name(s: Storage) -> &'static str {
    match s {
        Storage::Rgb24 => "RGB24",
        Storage::Scalar(d) => d.name(),
    }
}

/// nibabel's `Nifti1Header.get_slope_inter`: slope 0 or non-finite means no scaling, a
/// non-finite intercept with a valid slope is an error. `(1, 0)` is returned as `None`.
pub(super) fn scaling(slope: f64, inter: f64) -> Result<Option<(f64, f64)>, String> {
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
