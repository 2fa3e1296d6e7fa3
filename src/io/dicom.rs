//! DICOM input (dicom-rs): one file, or one series of a folder, into a [`Volume`]. A folder of
//! several series is read after a choice among them ([`list_series`] lists them from the
//! headers; [`read_series`] reads the one chosen, decoding only its pixel data).
//!
//! Slices are sorted by their position along the slice normal (ImagePositionPatient projected on
//! the cross product of the ImageOrientationPatient cosines), RescaleSlope/Intercept are applied
//! (CT in Hounsfield units), and the spacing and orientation become the affine. DICOM's patient
//! space is LPS; augscope's `world_from_voxel` is RAS like NIfTI's, so the x and y rows are
//! negated (what nibabel and dcm2niix do). The array is `[slice, row, column]` = `[z, y, x]`, so
//! NIfTI voxel axes `(i, j, k)` are (column, row, slice). Native (uncompressed) transfer syntaxes
//! only; compressed pixel data gives a clear error.

use std::path::{Path, PathBuf};

use dicom_core::value::PrimitiveValue;
use dicom_dictionary_std::tags;
use dicom_object::{DefaultDicomObject, Tag};

use super::IoError;
use super::dicom_geometry::{Geometry, MAX_SPACING_MM};
pub use super::dicom_series::{SeriesInfo, choose};
use super::dicom_series::{
    SliceError, err, file_series, folder_series, has_preamble, listing, open, opt_floats, opt_int,
    unreadable_slice,
};
use crate::core::volume::{DType, Volume};

const IMPLICIT_LE: &str = "1.2.840.10008.1.2";
const EXPLICIT_LE: &str = "1.2.840.10008.1.2.1";
const EXPLICIT_BE: &str = "1.2.840.10008.1.2.2";
const DEFLATED_LE: &str = "1.2.840.10008.1.2.1.99";

/// Whether a path names DICOM input: a `.dcm`/`.dicom` file, a folder, or a file starting with the
/// `DICM` preamble.
pub fn is_dicom(path: &Path) -> bool {
    if path.is_dir() {
        return true;
    }
    let lower = path.to_string_lossy().to_ascii_lowercase();
    lower.ends_with(".dcm") || lower.ends_with(".dicom") || has_preamble(path)
}

/// One decoded slice (or multi-frame stack) of a series.
struct Slice {
    path: PathBuf,
    rows: usize,
    cols: usize,
    frames: usize,
    position: Option<[f64; 3]>,
    orientation: Option<[f64; 6]>,
    pixel_spacing: Option<[f64; 2]>,
    thickness: Option<f64>,
    between: Option<f64>,
    instance: i64,
    window: Option<(f64, f64)>,
    dtype: DType,
    values: Vec<f32>,
}

fn read_slice(path: &Path) -> Result<Slice, SliceError> {
    let (obj, _) = open(path, false)?;
    if obj.element_opt(tags::PIXEL_DATA).ok().flatten().is_none() {
        return Err(SliceError::NotAnImage(err("no pixel data", path)));
    }
    decode_slice(path, obj).map_err(SliceError::Unreadable)
}

/// The slice of an opened DICOM image.
fn decode_slice(path: &Path, obj: DefaultDicomObject) -> Result<Slice, IoError> {
    let ts = native_transfer_syntax(&obj, path)?;
    let format = pixel_format(&obj, path)?;
    let geometry = Geometry::of(&obj, path)?;
    let (values, dtype) = decode_pixels(&obj, &format, ts == EXPLICIT_BE, path)?;
    let values = rescale(&obj, values);
    Ok(Slice {
        path: path.to_path_buf(),
        rows: format.rows,
        cols: format.cols,
        frames: format.frames,
        position: geometry.position,
        orientation: geometry.orientation,
        pixel_spacing: geometry.pixel_spacing,
        thickness: geometry.thickness,
        between: geometry.between,
        instance: opt_int(&obj, tags::INSTANCE_NUMBER).unwrap_or(0),
        window: display_window(&obj),
        dtype,
        values,
    })
}

/// The transfer syntax of an image, or an error where its pixel data is compressed.
fn native_transfer_syntax(obj: &DefaultDicomObject, path: &Path) -> Result<String, IoError> {
    let ts = obj
        .meta()
        .transfer_syntax()
        .trim_end_matches('\0')
        .to_string();
    if ![IMPLICIT_LE, EXPLICIT_LE, EXPLICIT_BE, DEFLATED_LE].contains(&ts.as_str()) {
        return Err(err(
            format!(
                "compressed pixel data (transfer syntax {ts}) is not supported; decompress it \
                 first, e.g. with gdcmconv --raw or dcmdjpeg"
            ),
            path,
        ));
    }
    Ok(ts)
}

/// The size and sample layout an image header declares for its pixel data.
struct PixelFormat {
    rows: usize,
    cols: usize,
    frames: usize,
    bits: i64,
    signed: bool,
}

impl PixelFormat {
    /// The number of values the header declares: rows x columns x frames.
    fn len(&self) -> usize {
        self.rows * self.cols * self.frames
    }
}

/// The checked size and sample layout of an image: one sample per pixel, a plausible size.
fn pixel_format(obj: &DefaultDicomObject, path: &Path) -> Result<PixelFormat, IoError> {
    let need = |tag: Tag, name: &str| {
        opt_int(obj, tag).ok_or_else(|| {
            err(
                format!("the {name} attribute is missing or not a number"),
                path,
            )
        })
    };
    let rows = need(tags::ROWS, "Rows")?;
    let cols = need(tags::COLUMNS, "Columns")?;
    let bits = need(tags::BITS_ALLOCATED, "BitsAllocated")?;
    let signed = opt_int(obj, tags::PIXEL_REPRESENTATION).unwrap_or(0) == 1;
    let samples = opt_int(obj, tags::SAMPLES_PER_PIXEL).unwrap_or(1);
    let frames = opt_int(obj, tags::NUMBER_OF_FRAMES).unwrap_or(1);
    if samples != 1 {
        return Err(err(
            format!("{samples} samples per pixel (colour DICOM) is not supported"),
            path,
        ));
    }
    if !(1..=65535).contains(&rows)
        || !(1..=65535).contains(&cols)
        || !(1..=100_000).contains(&frames)
    {
        return Err(err(
            format!("implausible image size {rows} rows x {cols} columns x {frames} frames"),
            path,
        ));
    }
    Ok(PixelFormat {
        rows: rows as usize,
        cols: cols as usize,
        frames: frames as usize,
        bits,
        signed,
    })
}

/// The pixel values of an image as stored (before rescaling), and their stored type.
fn decode_pixels(
    obj: &DefaultDicomObject,
    format: &PixelFormat,
    big_endian: bool,
    path: &Path,
) -> Result<(Vec<f32>, DType), IoError> {
    let PixelFormat { bits, signed, .. } = *format;
    let n = format.len();
    let pixel = obj
        .element_opt(tags::PIXEL_DATA)
        .ok()
        .flatten()
        .ok_or_else(|| err("no pixel data", path))?;
    let Some(prim) = pixel.value().primitive() else {
        return Err(err(
            "encapsulated (compressed) pixel data is not supported",
            path,
        ));
    };
    let short = |have: usize| {
        err(
            format!("pixel data holds {have} values, the header declares {n}"),
            path,
        )
    };
    match (prim, bits) {
        (PrimitiveValue::U16(v), 16) => {
            if v.len() < n {
                return Err(short(v.len()));
            }
            if signed {
                Ok((
                    v[..n].iter().map(|&x| x as i16 as f32).collect(),
                    DType::I16,
                ))
            } else {
                Ok((v[..n].iter().map(|&x| x as f32).collect(), DType::U16))
            }
        }
        (PrimitiveValue::I16(v), 16) => {
            if v.len() < n {
                return Err(short(v.len()));
            }
            Ok((v[..n].iter().map(|&x| x as f32).collect(), DType::I16))
        }
        (_, 8 | 16 | 32) => {
            let bytes = pixel
                .to_bytes()
                .map_err(|e| err(format!("cannot read pixel data: {e}"), path))?;
            let width = bits as usize / 8;
            if bytes.len() < n * width {
                return Err(short(bytes.len() / width));
            }
            Ok(decode_words(&bytes[..n * width], width, signed, big_endian))
        }
        _ => Err(err(
            format!("{bits} bits allocated per pixel is not supported (8, 16 or 32)"),
            path,
        )),
    }
}

/// Raw pixel bytes read as words of `width` bytes (1, 2 or 4), unsigned or two's complement.
fn decode_words(bytes: &[u8], width: usize, signed: bool, big_endian: bool) -> (Vec<f32>, DType) {
    let word = |c: &[u8]| -> u32 {
        let mut b = [0u8; 4];
        b[..width].copy_from_slice(c);
        if big_endian {
            b[..width].reverse();
        }
        u32::from_le_bytes(b)
    };
    let it = bytes.chunks_exact(width).map(word);
    match (width, signed) {
        (1, false) => (it.map(|x| x as f32).collect(), DType::U8),
        (1, true) => (it.map(|x| x as u8 as i8 as f32).collect(), DType::I8),
        (2, false) => (it.map(|x| x as f32).collect(), DType::U16),
        (2, true) => (it.map(|x| x as u16 as i16 as f32).collect(), DType::I16),
        (_, false) => (it.map(|x| x as f32).collect(), DType::U32),
        (_, true) => (it.map(|x| x as i32 as f32).collect(), DType::I32),
    }
}

/// Stored values with RescaleSlope and RescaleIntercept applied (CT in Hounsfield units).
fn rescale(obj: &DefaultDicomObject, values: Vec<f32>) -> Vec<f32> {
    let slope = opt_floats(obj, tags::RESCALE_SLOPE).map_or(1.0, |v| v[0]);
    let intercept = opt_floats(obj, tags::RESCALE_INTERCEPT).map_or(0.0, |v| v[0]);
    if slope != 1.0 || intercept != 0.0 {
        values
            .into_iter()
            .map(|v| (v as f64 * slope + intercept) as f32)
            .collect()
    } else {
        values
    }
}

/// The header's display window (centre, width), where both are given and the width is positive.
fn display_window(obj: &DefaultDicomObject) -> Option<(f64, f64)> {
    match (
        opt_floats(obj, tags::WINDOW_CENTER),
        opt_floats(obj, tags::WINDOW_WIDTH),
    ) {
        (Some(c), Some(w)) if w[0] > 0.0 => Some((c[0], w[0])),
        _ => None,
    }
}

/// Slices sorted along the normal must be evenly spaced: a missing slice or a stack of uneven
/// gaps has no regular grid, and one spacing would put every slice after the gap in the wrong
/// place. Tolerance: 1 % of the mean gap (positions are written with a few decimals).
fn check_even_gaps(slices: &[Slice], normal: [f64; 3], path: &Path) -> Result<(), IoError> {
    let at: Vec<f64> = slices
        .iter()
        .filter_map(|s| s.position.map(|p| dot(p, normal)))
        .collect();
    if at.len() < 3 {
        return Ok(());
    }
    let gaps: Vec<f64> = at.windows(2).map(|w| w[1] - w[0]).collect();
    let mean = (at[at.len() - 1] - at[0]) / gaps.len() as f64;
    let (lo, hi) = gaps
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &g| {
            (l.min(g), h.max(g))
        });
    if hi - lo > 0.01 * mean.abs() {
        return Err(err(
            format!(
                "the slices are unevenly spaced (gaps from {lo:.4} to {hi:.4} mm along the \
                 slice normal: a missing slice, or a variable-spacing acquisition); augscope \
                 needs a regular grid: resample the series first (e.g. dcm2niix, then a \
                 resampler)"
            ),
            path,
        ));
    }
    Ok(())
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Reads a DICOM file or a folder holding one series.
pub fn read(path: &Path) -> Result<Volume, IoError> {
    read_series(path, None)
}

/// Reads a DICOM file, or one series of a folder: the series `choice` names (its
/// SeriesInstanceUID, or a SeriesNumber that one series has: [`choose`]), else the folder's only
/// one. A folder of several series and no choice is [`IoError::SeveralSeries`], which lists them.
/// Only the chosen series' files are decoded.
pub fn read_series(path: &Path, choice: Option<&str>) -> Result<Volume, IoError> {
    let mut slices = if path.is_dir() {
        read_files(&chosen_files(path, choice)?)?
    } else {
        if let Some(c) = choice {
            let own = file_series(path)?;
            choose(std::slice::from_ref(&own), c).map_err(|why| err(why, path))?;
        }
        vec![read_slice(path).map_err(SliceError::into_inner)?]
    };
    check_slices(&slices, path)?;
    let axes = Axes::of(&slices[0]);
    order_slices(&mut slices, axes.normal, path)?;
    let grid = series_grid(&slices, axes.normal, path)?;
    let affine = world_from_voxel(&axes, &grid, slices[0].position.unwrap_or([0.0; 3]));
    Ok(build_volume(slices, &axes, &grid, affine))
}

/// The series of a DICOM folder (or the one of a file), from the files' headers without their
/// pixel data, ordered by SeriesNumber.
pub fn list_series(path: &Path) -> Result<Vec<SeriesInfo>, IoError> {
    if path.is_dir() {
        Ok(folder_series(path)?.into_iter().map(|(s, _)| s).collect())
    } else {
        Ok(vec![file_series(path)?])
    }
}

/// The files of the series of a folder that `choice` names, or of its only series.
fn chosen_files(path: &Path, choice: Option<&str>) -> Result<Vec<PathBuf>, IoError> {
    let (infos, mut files): (Vec<SeriesInfo>, Vec<Vec<PathBuf>>) =
        folder_series(path)?.into_iter().unzip();
    let uid = match choice {
        Some(c) => choose(&infos, c).map_err(|why| err(why, path))?.uid.clone(),
        None if infos.len() == 1 => infos[0].uid.clone(),
        None => {
            let why = format!(
                "the folder holds {} series; choose one with --series UID or NUMBER: {}",
                infos.len(),
                listing(&infos)
            );
            return Err(IoError::several_series(why, infos, path));
        }
    };
    let at = infos.iter().position(|s| s.uid == uid).unwrap_or(0);
    Ok(files.swap_remove(at))
}

/// The slices of a series' images; one that cannot be read is an error (the series would load
/// with a slice missing).
fn read_files(files: &[PathBuf]) -> Result<Vec<Slice>, IoError> {
    files
        .iter()
        .map(|f| read_slice(f).map_err(|e| unreadable_slice(e.into_inner(), f)))
        .collect()
}

/// Checks that the slices are of one size, with no multi-frame file among several.
fn check_slices(slices: &[Slice], path: &Path) -> Result<(), IoError> {
    let (rows, cols) = (slices[0].rows, slices[0].cols);
    if let Some(s) = slices.iter().find(|s| s.rows != rows || s.cols != cols) {
        return Err(err(
            format!(
                "slices differ in size ({rows}x{cols} and {}x{})",
                s.rows, s.cols
            ),
            &s.path,
        ));
    }
    if slices.len() > 1 && slices.iter().any(|s| s.frames != 1) {
        return Err(err(
            "a folder of multi-frame files is not supported; open one file",
            path,
        ));
    }
    Ok(())
}

/// The patient-space (LPS) directions of a series' voxel axes.
struct Axes {
    /// Whether the header gave an orientation (else the axes are the identity's).
    oriented: bool,
    /// The direction of increasing column index.
    row_dir: [f64; 3],
    /// The direction of increasing row index.
    col_dir: [f64; 3],
    /// The slice normal: `row_dir` x `col_dir`.
    normal: [f64; 3],
}

impl Axes {
    /// The axes of a series from its first slice's ImageOrientationPatient.
    fn of(first: &Slice) -> Axes {
        let orient = first.orientation.unwrap_or([1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
        let row_dir = [orient[0], orient[1], orient[2]];
        let col_dir = [orient[3], orient[4], orient[5]];
        Axes {
            oriented: first.orientation.is_some(),
            row_dir,
            col_dir,
            normal: cross(row_dir, col_dir),
        }
    }
}

/// Sorts the slices along the normal (distinct, evenly spaced), else by instance number.
fn order_slices(slices: &mut [Slice], normal: [f64; 3], path: &Path) -> Result<(), IoError> {
    if slices.iter().all(|s| s.position.is_some()) {
        slices.sort_by(|a, b| {
            let pa = a.position.map_or(0.0, |p| dot(p, normal));
            let pb = b.position.map_or(0.0, |p| dot(p, normal));
            pa.total_cmp(&pb)
        });
        for w in slices.windows(2) {
            let (Some(a), Some(b)) = (w[0].position, w[1].position) else {
                continue;
            };
            if (dot(b, normal) - dot(a, normal)).abs() < 1e-6 {
                return Err(err(
                    "two slices share one position (a series with repeated or multiple \
                     acquisitions?)",
                    &w[1].path,
                ));
            }
        }
        check_even_gaps(slices, normal, path)?;
    } else {
        slices.sort_by_key(|s| s.instance);
    }
    Ok(())
}

/// The voxel grid of a sorted series: pixel spacing, slice step and depth.
struct Grid {
    sp_row: f64,
    sp_col: f64,
    /// The patient-space (LPS) offset from one slice to the next.
    step: [f64; 3],
    sp_slice: f64,
    depth: usize,
}

/// The voxel grid of a sorted series, with every spacing checked to be plausible.
fn series_grid(slices: &[Slice], normal: [f64; 3], path: &Path) -> Result<Grid, IoError> {
    let [sp_row, sp_col] = slices[0].pixel_spacing.unwrap_or([1.0, 1.0]);
    let depth: usize = slices.iter().map(|s| s.frames).sum();
    // The slice step: from the first to the last position, else the header's spacing.
    let step: [f64; 3] = match (
        slices.len() > 1,
        slices[0].position,
        slices.last().and_then(|s| s.position),
    ) {
        (true, Some(a), Some(b)) => {
            let k = (slices.len() - 1) as f64;
            [(b[0] - a[0]) / k, (b[1] - a[1]) / k, (b[2] - a[2]) / k]
        }
        _ => {
            let t = slices[0].between.or(slices[0].thickness).unwrap_or(1.0);
            [normal[0] * t, normal[1] * t, normal[2] * t]
        }
    };
    let sp_slice = dot(step, step).sqrt();
    for (what, v) in [
        ("pixel spacing (rows)", sp_row),
        ("pixel spacing (columns)", sp_col),
        ("slice spacing", if depth > 1 { sp_slice } else { 1.0 }),
    ] {
        if !(v.is_finite() && v > 0.0 && v <= MAX_SPACING_MM) {
            return Err(err(
                format!(
                    "implausible {what} {v} mm (a voxel of up to {MAX_SPACING_MM} mm is read); \
                     the header is damaged"
                ),
                path,
            ));
        }
    }
    Ok(Grid {
        sp_row,
        sp_col,
        step,
        sp_slice,
        depth,
    })
}

/// The RAS affine from voxel (column, row, slice) to world, given the first slice's LPS position.
fn world_from_voxel(axes: &Axes, grid: &Grid, origin: [f64; 3]) -> [[f64; 4]; 4] {
    // LPS -> RAS: negate x and y.
    let sign = [-1.0, -1.0, 1.0];
    let mut affine = crate::core::volume::identity4();
    for r in 0..3 {
        affine[r][0] = sign[r] * axes.row_dir[r] * grid.sp_col;
        affine[r][1] = sign[r] * axes.col_dir[r] * grid.sp_row;
        affine[r][2] = sign[r] * grid.step[r];
        affine[r][3] = sign[r] * origin[r];
    }
    affine
}

/// The volume of sorted slices: their values stacked, 2-D for a single frame, else 3-D.
fn build_volume(mut slices: Vec<Slice>, axes: &Axes, grid: &Grid, affine: [[f64; 4]; 4]) -> Volume {
    let (rows, cols, depth) = (slices[0].rows, slices[0].cols, grid.depth);
    let window = slices[0].window;
    let dtype = slices[0].dtype;
    let mut data = Vec::with_capacity(depth * rows * cols);
    for s in &mut slices {
        data.append(&mut s.values);
    }
    let mut vol = if depth == 1 {
        let mut v = Volume::new(data, vec![rows, cols], 1);
        v.spacing_mm = vec![grid.sp_row, grid.sp_col];
        v
    } else {
        let mut v = Volume::new(data, vec![depth, rows, cols], 1);
        v.spacing_mm = vec![grid.sp_slice, grid.sp_row, grid.sp_col];
        v
    };
    vol.world_from_voxel = affine;
    vol.dtype = dtype;
    vol.default_window = window;
    vol.oriented = axes.oriented;
    vol
}
