//! The series of a DICOM folder, from its files' headers: each file is read up to its pixel data,
//! which is not read, so listing a folder of thousands of slices costs their headers only. Which
//! files belong to which series (SeriesInstanceUID), what each series is (SeriesNumber,
//! SeriesDescription, Modality, slices, size), and the series a choice names (its UID, or a
//! SeriesNumber that one series has). Also the header helpers the reader shares: attribute
//! values, the `DICM` preamble, dicom-rs's errors on one line, and the files of a folder.

use std::path::{Path, PathBuf};

use dicom_dictionary_std::tags;
use dicom_object::{DefaultDicomObject, OpenFileOptions, Tag};

use super::IoError;

const FORMAT: &str = "DICOM";

pub(super) fn err(why: impl Into<String>, path: &Path) -> IoError {
    IoError::read(FORMAT, why, path)
}

/// One series of a DICOM folder, as its files' headers describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeriesInfo {
    /// SeriesInstanceUID (empty where the files carry none).
    pub uid: String,
    /// SeriesNumber, where the files give one.
    pub number: Option<i64>,
    /// SeriesDescription (empty where absent).
    pub description: String,
    /// Modality: CT, MR, … (empty where absent).
    pub modality: String,
    /// The image files of the series.
    pub files: usize,
    /// Its slices: the frames of its files together (one per file, but for multi-frame files).
    pub slices: usize,
    /// The size of its first file's images.
    pub rows: usize,
    pub cols: usize,
}

impl SeriesInfo {
    /// The series' name for a person: `#3 T1 axial` (the UID where it has no description).
    pub fn name(&self) -> String {
        let mut s = match self.number {
            Some(n) => format!("#{n}"),
            None => "series".to_string(),
        };
        match (self.description.is_empty(), self.uid.is_empty()) {
            (false, _) => s.push_str(&format!(" {}", self.description)),
            (true, false) => s.push_str(&format!(" {}", self.uid)),
            (true, true) => {}
        }
        s
    }

    /// A short label for a person: `#3 T1 axial (MR, 24 slices, 256×256)`.
    pub fn label(&self) -> String {
        let s = self.name();
        let mut details = vec![];
        if !self.modality.is_empty() {
            details.push(self.modality.clone());
        }
        details.push(plural(self.slices, "slice"));
        details.push(format!("{}×{}", self.rows, self.cols));
        format!("{s} ({})", details.join(", "))
    }

    /// The series as a message lists it: `UID (number 3, "T1 axial", 24 slices)`.
    fn summary(&self) -> String {
        let uid = if self.uid.is_empty() {
            "(no SeriesInstanceUID)"
        } else {
            &self.uid
        };
        let mut details = vec![match self.number {
            Some(n) => format!("number {n}"),
            None => "no number".to_string(),
        }];
        if !self.description.is_empty() {
            details.push(format!("\"{}\"", self.description));
        }
        details.push(plural(self.slices, "slice"));
        format!("{uid} ({})", details.join(", "))
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The series of a list as a message names them, separated by semicolons.
pub(super) fn listing(series: &[SeriesInfo]) -> String {
    series
        .iter()
        .map(SeriesInfo::summary)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The series `choice` names among `series`: the one whose SeriesInstanceUID it is, else the one
/// whose SeriesNumber it is, when no other series has that number. The error says why none is,
/// and lists the series to choose from.
pub fn choose<'a>(series: &'a [SeriesInfo], choice: &str) -> Result<&'a SeriesInfo, String> {
    let choice = choice.trim();
    if let Some(s) = series.iter().find(|s| s.uid == choice) {
        return Ok(s);
    }
    let numbered: Vec<&SeriesInfo> = match choice.parse::<i64>() {
        Ok(n) => series.iter().filter(|s| s.number == Some(n)).collect(),
        Err(_) => vec![],
    };
    match numbered[..] {
        [one] => Ok(one),
        [] => Err(format!(
            "no series {choice} (no SeriesInstanceUID or SeriesNumber matches); the series \
             here: {}",
            listing(series)
        )),
        ref several => Err(format!(
            "{} series have the SeriesNumber {choice}; choose one by its SeriesInstanceUID: {}",
            several.len(),
            several
                .iter()
                .map(|s| s.summary())
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}

pub(super) fn opt_str(obj: &DefaultDicomObject, tag: Tag) -> Option<String> {
    obj.element_opt(tag)
        .ok()
        .flatten()
        .and_then(|e| e.to_str().ok())
        .map(|s| s.trim().trim_end_matches('\0').to_string())
}

pub(super) fn opt_floats(obj: &DefaultDicomObject, tag: Tag) -> Option<Vec<f64>> {
    obj.element_opt(tag)
        .ok()
        .flatten()
        .and_then(|e| e.to_multi_float64().ok())
        .filter(|v| !v.is_empty() && v.iter().all(|x| x.is_finite()))
}

pub(super) fn opt_int(obj: &DefaultDicomObject, tag: Tag) -> Option<i64> {
    obj.element_opt(tag)
        .ok()
        .flatten()
        .and_then(|e| e.to_int::<i64>().ok())
}

/// Whether a file starts with DICOM's 128-byte preamble and `DICM`.
pub(super) fn has_preamble(path: &Path) -> bool {
    let mut head = [0u8; 132];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok()
        && &head[128..132] == b"DICM"
}

/// An error and its causes, outermost first: dicom-rs's own line ("Could not read data set
/// token") says what failed, its causes say why.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cause = c.source();
    }
    s
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Why a file gave no slice: it is no DICOM image at all (a DICOMDIR, a structured report, notes
/// beside the series: skipped in a folder), or an image that cannot be read (an error, since the
/// series would load with a slice missing).
pub(super) enum SliceError {
    NotAnImage(IoError),
    Unreadable(IoError),
}

impl SliceError {
    pub(super) fn into_inner(self) -> IoError {
        match self {
            SliceError::NotAnImage(e) | SliceError::Unreadable(e) => e,
        }
    }
}

/// Opens a DICOM file checked by the structural guard, whole or up to its pixel data
/// (`header_only`); the guard's answer says whether it holds pixel data (`None`: unknown).
pub(super) fn open(
    path: &Path,
    header_only: bool,
) -> Result<(DefaultDicomObject, Option<bool>), SliceError> {
    let pixel_data =
        super::dicom_guard::check(path).map_err(|why| SliceError::Unreadable(err(why, path)))?;
    let options = if header_only {
        OpenFileOptions::new().read_until(tags::PIXEL_DATA)
    } else {
        OpenFileOptions::new()
    };
    let obj = options.open_file(path).map_err(|e| {
        let e = err(one_line(&with_causes(&e)), path);
        // A file without the DICM preamble is no DICOM file at all (notes, a README).
        if has_preamble(path) {
            SliceError::Unreadable(e)
        } else {
            SliceError::NotAnImage(e)
        }
    })?;
    Ok((obj, pixel_data))
}

/// What an image file's header says of the series it belongs to.
struct Header {
    path: PathBuf,
    uid: String,
    number: Option<i64>,
    description: String,
    modality: String,
    rows: usize,
    cols: usize,
    frames: usize,
}

/// The header of an image file, its pixel data left unread. The size is as the header gives it
/// (checked when the pixel data is decoded).
fn read_header(path: &Path) -> Result<Header, SliceError> {
    let (obj, pixel_data) = open(path, true)?;
    if pixel_data == Some(false) {
        return Err(SliceError::NotAnImage(err("no pixel data", path)));
    }
    let size = |tag: Tag| opt_int(&obj, tag).map_or(0, |v| v.clamp(0, 65535) as usize);
    Ok(Header {
        path: path.to_path_buf(),
        uid: opt_str(&obj, tags::SERIES_INSTANCE_UID).unwrap_or_default(),
        number: opt_int(&obj, tags::SERIES_NUMBER),
        description: opt_str(&obj, tags::SERIES_DESCRIPTION).unwrap_or_default(),
        modality: opt_str(&obj, tags::MODALITY).unwrap_or_default(),
        rows: size(tags::ROWS),
        cols: size(tags::COLUMNS),
        frames: opt_int(&obj, tags::NUMBER_OF_FRAMES).map_or(1, |v| v.clamp(1, 100_000) as usize),
    })
}

/// The files of a series folder, sorted by name, without hidden files and subfolders.
fn folder_files(path: &Path) -> Result<Vec<PathBuf>, IoError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| err(e.to_string(), path))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The error of an image in a series folder that cannot be read: the series would load a slice
/// short, with its spacing stretched over the gap.
pub(super) fn unreadable_slice(e: IoError, file: &Path) -> IoError {
    match e {
        IoError::Read { why, .. } => err(
            format!(
                "a slice of the series cannot be read ({why}); remove it or repair it, or the \
                 volume would load with a slice missing"
            ),
            file,
        ),
        e => e,
    }
}

/// The series of a folder and their files (sorted by name), ordered by SeriesNumber, then UID.
/// Files that are no DICOM image (a DICOMDIR, notes) are skipped; an image whose header cannot be
/// read is an error, since it may belong to any series.
pub(super) fn folder_series(path: &Path) -> Result<Vec<(SeriesInfo, Vec<PathBuf>)>, IoError> {
    let files = folder_files(path)?;
    let mut headers = vec![];
    let mut first_err = None;
    for f in &files {
        match read_header(f) {
            Ok(h) => headers.push(h),
            Err(SliceError::NotAnImage(e)) => {
                first_err.get_or_insert(e);
            }
            Err(SliceError::Unreadable(e)) => return Err(unreadable_slice(e, f)),
        }
    }
    if headers.is_empty() {
        return Err(match first_err {
            Some(IoError::Read { why, .. }) if !files.is_empty() => err(
                format!("no readable DICOM image in the folder (first problem: {why})"),
                path,
            ),
            _ => err("no DICOM files in the folder", path),
        });
    }
    Ok(group(headers))
}

/// The series of a DICOM file (one file, its frames as slices).
pub(super) fn file_series(path: &Path) -> Result<SeriesInfo, IoError> {
    let header = read_header(path).map_err(SliceError::into_inner)?;
    let mut series = group(vec![header]);
    Ok(series.remove(0).0)
}

/// Headers grouped by SeriesInstanceUID, each group's files in the order given, the groups
/// ordered by SeriesNumber (series without one last), then UID.
fn group(headers: Vec<Header>) -> Vec<(SeriesInfo, Vec<PathBuf>)> {
    let mut series: Vec<(SeriesInfo, Vec<PathBuf>)> = vec![];
    for h in headers {
        let at = match series.iter().position(|(s, _)| s.uid == h.uid) {
            Some(i) => i,
            None => {
                series.push((
                    SeriesInfo {
                        uid: h.uid.clone(),
                        number: h.number,
                        description: h.description.clone(),
                        modality: h.modality.clone(),
                        files: 0,
                        slices: 0,
                        rows: h.rows,
                        cols: h.cols,
                    },
                    vec![],
                ));
                series.len() - 1
            }
        };
        let (info, paths) = &mut series[at];
        info.files += 1;
        info.slices += h.frames;
        paths.push(h.path);
    }
    series.sort_by(|(a, _), (b, _)| {
        (a.number.is_none(), a.number, &a.uid).cmp(&(b.number.is_none(), b.number, &b.uid))
    });
    series
}
