//! Loaders and writers, one module per format; `load`/`save` dispatch on the file name.
//!
//! Every loader returns a [`Volume`] in docs/design.md §2 order (`[z, y, x]` or `[y, x]`, channels
//! leading). Every writer writes a temporary file beside the target and renames it, so an output
//! appears whole or not at all.

pub mod dicom;
mod dicom_geometry;
mod dicom_guard;
mod dicom_series;
pub mod image2d;
pub mod nifti;
pub mod npy;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::core::volume::{DType, Volume};

/// A file that could not be read or written. Messages say what failed and why, and end with the
/// path.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    #[error("cannot read {format}: {why}: {}", path.display())]
    Read {
        format: &'static str,
        why: String,
        path: PathBuf,
    },
    #[error("cannot write {format}: {why}: {}", path.display())]
    Write {
        format: &'static str,
        why: String,
        path: PathBuf,
    },
    /// A DICOM folder of several series, and no choice among them: `series` lists them, for a
    /// picker (the message lists them too, and says how to choose on the command line).
    #[error("cannot read DICOM: {why}: {}", path.display())]
    SeveralSeries {
        why: String,
        series: Vec<dicom::SeriesInfo>,
        path: PathBuf,
    },
    #[error(
        "unknown file type (expected .nii, .nii.gz, .npy, .png, .jpg, .jpeg, .tif, .tiff, .dcm or a DICOM folder): {}",
        path.display()
    )]
    UnknownFormat { path: PathBuf },
}

/// An error's text on one line: a header field quoted in it may hold newlines or other control
/// characters (a damaged file's), which are shown escaped.
fn one_line(why: String) -> String {
    if !why.chars().any(char::is_control) {
        return why;
    }
    why.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

impl IoError {
    pub fn read(format: &'static str, why: impl Into<String>, path: &Path) -> Self {
        IoError::Read {
            format,
            why: one_line(why.into()),
            path: path.to_path_buf(),
        }
    }
    pub fn several_series(
        why: impl Into<String>,
        series: Vec<dicom::SeriesInfo>,
        path: &Path,
    ) -> Self {
        IoError::SeveralSeries {
            why: one_line(why.into()),
            series,
            path: path.to_path_buf(),
        }
    }
    pub fn write(format: &'static str, why: impl Into<String>, path: &Path) -> Self {
        IoError::Write {
            format,
            why: one_line(why.into()),
            path: path.to_path_buf(),
        }
    }
}

/// File formats, chosen by extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Nifti,
    Npy,
    Png,
    Jpeg,
    Tiff,
}

impl Format {
    pub fn from_path(path: &Path) -> Result<Format, IoError> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let f = if name.ends_with(".nii") || name.ends_with(".nii.gz") {
            Format::Nifti
        } else if name.ends_with(".npy") {
            Format::Npy
        } else if name.ends_with(".png") {
            Format::Png
        } else if name.ends_with(".jpg") || name.ends_with(".jpeg") {
            Format::Jpeg
        } else if name.ends_with(".tif") || name.ends_with(".tiff") {
            Format::Tiff
        } else {
            return Err(IoError::UnknownFormat {
                path: path.to_path_buf(),
            });
        };
        Ok(f)
    }
}

/// How to interpret a file on loading.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// The first axis of a `.npy` array is channels (`(3, H, W)` RGB, multi-channel volumes).
    pub channels_first: bool,
    /// The file is a label map: integer values that f32 cannot hold exactly (beyond 2^24) are
    /// kept as codes into a table of the exact values ([`crate::core::LabelValues`]).
    pub label: bool,
    /// The series to read of a DICOM folder that holds several: its SeriesInstanceUID, or a
    /// SeriesNumber that one series has ([`dicom::choose`]). Without, such a folder is
    /// [`IoError::SeveralSeries`]; with, any input but DICOM is an error.
    pub series: Option<String>,
}

/// How to write a volume.
#[derive(Clone, Copy, Debug, Default)]
pub struct SaveOptions {
    /// Write in the volume's own storage type (`--dtype keep`) instead of float32. Integer types
    /// are rounded and clamped as scipy does.
    pub keep_dtype: bool,
}

/// Loads a scan by file extension.
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Volume, IoError> {
    // Reading a FIFO, socket or device would block or never end: regular files and folders only.
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() || m.is_dir() => {}
        Ok(_) => {
            return Err(IoError::read(
                "input",
                "not a regular file or folder (a FIFO, socket or device)",
                path,
            ));
        }
        Err(e) => return Err(IoError::read("input", e.to_string(), path)),
    }
    if dicom::is_dicom(path) {
        return dicom::read_series(path, opts.series.as_deref());
    }
    if let Some(series) = &opts.series {
        return Err(IoError::read(
            "input",
            format!("series {series} was chosen, but this is no DICOM file or folder"),
            path,
        ));
    }
    match Format::from_path(path)? {
        Format::Nifti => nifti::read_with(path, opts.label),
        Format::Npy => npy::read_volume_with(path, opts.channels_first, opts.label),
        Format::Png | Format::Jpeg | Format::Tiff => image2d::read(path),
    }
}

/// Makes `v` a label map of codes into the table of its exact values `wide` (C order, channel
/// after channel) when f32 cannot hold them all; leaves it as it is otherwise.
pub(crate) fn exact_labels(v: &mut Volume, wide: &[i128], path: &Path) -> Result<(), IoError> {
    match crate::core::LabelValues::encode(wide) {
        Ok(Some((table, codes))) if codes.len() == v.data.len() => {
            v.data = codes;
            v.label_values = Some(std::sync::Arc::new(table));
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(why) => Err(IoError::read("label map", why, path)),
    }
}

/// The values of 32- or 64-bit integer storage `d` in `b` (big-endian when `big`), exactly
/// (`None` for other types, which f32 holds exactly or which are floats).
pub(crate) fn wide_integers(b: &[u8], d: DType, big: bool) -> Option<Vec<i128>> {
    macro_rules! conv {
        ($t:ty) => {{
            const N: usize = std::mem::size_of::<$t>();
            b.chunks_exact(N)
                .map(|c| {
                    let a: [u8; N] = c.try_into().unwrap_or([0; N]);
                    (if big {
                        <$t>::from_be_bytes(a)
                    } else {
                        <$t>::from_le_bytes(a)
                    }) as i128
                })
                .collect()
        }};
    }
    Some(match d {
        DType::U32 => conv!(u32),
        DType::I32 => conv!(i32),
        DType::U64 => conv!(u64),
        DType::I64 => conv!(i64),
        _ => return None,
    })
}

/// Little-endian `d` values of exact integers (a label map's, [`crate::core::LabelValues`]),
/// clamped to the type's range, appended to `out`.
pub(crate) fn encode_exact(values: &[i128], d: DType, out: &mut Vec<u8>) {
    macro_rules! put {
        ($t:ty) => {
            for &v in values {
                let q = v.clamp(<$t>::MIN as i128, <$t>::MAX as i128) as $t;
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
        DType::F32 => values
            .iter()
            .for_each(|&v| out.extend_from_slice(&(v as f32).to_le_bytes())),
        DType::F64 => values
            .iter()
            .for_each(|&v| out.extend_from_slice(&(v as f64).to_le_bytes())),
    }
}

/// Writes a volume by file extension (NIfTI, NumPy or PNG).
pub fn save(path: &Path, vol: &Volume, opts: &SaveOptions) -> Result<(), IoError> {
    match Format::from_path(path)? {
        Format::Nifti => nifti::write(path, vol, opts),
        Format::Npy => npy::write_volume(path, vol, opts),
        Format::Png => image2d::write_png(path, vol),
        Format::Jpeg | Format::Tiff => Err(IoError::write(
            "image",
            "only PNG, NIfTI and NumPy outputs are supported",
            path,
        )),
    }
}

/// Writes `path` through a temporary file in the same folder, renamed into place on success and
/// removed on failure, so that readers never see a partial file.
pub fn atomic_write(
    path: &Path,
    format: &'static str,
    body: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<(), IoError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let f = File::create(&tmp)?;
        let mut w = BufWriter::new(f);
        body(&mut w)?;
        w.flush()?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        IoError::write(format, e.to_string(), path)
    })
}
