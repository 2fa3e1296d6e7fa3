//! A structural check of a DICOM file before dicom-rs parses it, so that a hostile or damaged
//! file gives one clear error instead of a stack overflow or a huge allocation: dicom-rs parses
//! nested sequences recursively (thousands of nested undefined-length sequences overflow the
//! stack) and allocates what an element's length declares before reading it (a 10 KB file can
//! ask for 4 GB).
//!
//! The walk must see the bytes exactly as dicom-rs will parse them: it starts where dicom-rs
//! starts, reads the file meta group by dicom-object's rule (as many bytes as its group length
//! declares, whatever the elements' groups) and the data set in the transfer syntax the meta
//! group names. It reads element headers only (tags, VRs and lengths, PS3.5 §7), seeking over
//! values: every defined length must fit in the bytes left, sequences may nest at most
//! [`MAX_DEPTH`] deep, and every undefined-length sequence or item must end. Deflated data sets
//! are left to dicom-rs (their lengths refer to the inflated stream).

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use dicom_core::dictionary::DataDictionary;
use dicom_core::{Tag, VR};
use dicom_dictionary_std::StandardDataDictionary;

/// How deep sequences may nest (real data sets nest a few levels).
pub const MAX_DEPTH: usize = 32;

const UNDEFINED: u32 = 0xFFFF_FFFF;
const ITEM: (u16, u16) = (0xFFFE, 0xE000);
const ITEM_END: (u16, u16) = (0xFFFE, 0xE00D);
const SEQ_END: (u16, u16) = (0xFFFE, 0xE0DD);
const PIXEL_DATA: (u16, u16) = (0x7FE0, 0x0010);

/// Checks the structure of the DICOM file at `path`, from where dicom-rs starts reading; a file
/// that dicom-rs does not take for DICOM (no `DICM` after a preamble, nor at the very start) is
/// left to it (it refuses it with its own message). Returns whether the data set holds pixel
/// data at its top level (an image, not a DICOMDIR or a report), as the walk saw it; `None` where
/// the walk left the data set to dicom-rs (no `DICM`, a deflated data set).
pub fn check(path: &Path) -> Result<Option<bool>, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    let mut w = Walker {
        r: BufReader::new(file),
        pos: 0,
        size,
        explicit: true,
        big: false,
        pixel_data: false,
    };
    // Where dicom-object's `open_file` starts (`detect_preamble`): after a 128-byte preamble
    // and `DICM`, else after `DICM` at the very start.
    let mut head = Vec::with_capacity(132);
    (&mut w.r)
        .take(132)
        .read_to_end(&mut head)
        .map_err(|e| e.to_string())?;
    let start = if head.get(128..132) == Some(b"DICM".as_slice()) {
        132
    } else if head.get(..4) == Some(b"DICM".as_slice()) {
        4
    } else {
        return Ok(None);
    };
    w.r.seek(SeekFrom::Start(start))
        .map_err(|e| e.to_string())?;
    w.pos = start;
    match w.file_meta()?.as_str() {
        "1.2.840.10008.1.2" => w.explicit = false,
        "1.2.840.10008.1.2.2" => w.big = true,
        // Deflated data sets: their lengths refer to the inflated stream, and dicom-rs (built
        // without its deflate feature) refuses them once it has read the meta group.
        "1.2.840.10008.1.2.1.99" => return Ok(None),
        _ => {}
    }
    w.elements(None, 0)?;
    Ok(Some(w.pixel_data))
}

/// An element's tag, VR (explicit transfer syntaxes) and length.
type Header = ((u16, u16), Option<[u8; 2]>, u32);

struct Walker {
    r: BufReader<File>,
    pos: u64,
    size: u64,
    explicit: bool,
    big: bool,
    /// Whether the data set's top level holds PixelData.
    pixel_data: bool,
}

impl Walker {
    fn at(&self, what: &str) -> String {
        format!("damaged DICOM structure at byte {}: {what}", self.pos)
    }

    /// The file meta group, walked as dicom-object's `FileMetaTable::read_from` reads it
    /// (explicit VR little endian): the group length (0002,0000) first, then whole elements of
    /// any group while fewer bytes than it declares were read. A group length that ends early
    /// leaves the rest of group 0002 to the data set (in the data set's transfer syntax), one
    /// that ends late takes data set elements into the meta group; the walk must do the same,
    /// or it checks other bytes than dicom-rs parses. Returns the transfer syntax UID (the last
    /// one given, without trailing spaces and NULs, as dicom-rs keeps it).
    fn file_meta(&mut self) -> Result<String, String> {
        let (tag, _, len) = self.header()?;
        if tag != (0x0002, 0x0000) || len != 4 {
            return Err(
                self.at("the file meta group does not start with its group length (0002,0000)")
            );
        }
        let group_len = self.u32()?;
        let mut read = 0u32;
        let mut ts = String::new();
        while read < group_len {
            let start = self.pos;
            let (tag, _, len) = self.header()?;
            if len == UNDEFINED {
                return Err(self.at("an undefined length in the file meta group"));
            }
            self.fits(len, tag)?;
            let header_len = u32::try_from(self.pos - start).unwrap_or(u32::MAX);
            if tag == (0x0002, 0x0010) {
                // A UID has at most 64 characters (PS3.5 §9).
                if len > 64 {
                    return Err(self.at(&format!(
                        "a transfer syntax UID of {len} bytes (at most 64)"
                    )));
                }
                let mut v = vec![0u8; len as usize];
                self.read(&mut v)?;
                ts = String::from_utf8_lossy(&v)
                    .trim_end_matches(|c: char| c.is_whitespace() || c == '\0')
                    .to_string();
            } else {
                self.skip(len)?;
            }
            read = read.saturating_add(header_len).saturating_add(len);
        }
        Ok(ts)
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<(), String> {
        self.r
            .read_exact(buf)
            .map_err(|_| self.at("the file is cut short"))?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn skip(&mut self, n: u32) -> Result<(), String> {
        self.r
            .seek(SeekFrom::Current(i64::from(n)))
            .map_err(|e| e.to_string())?;
        self.pos += u64::from(n);
        Ok(())
    }

    fn u16(&mut self) -> Result<u16, String> {
        let mut b = [0u8; 2];
        self.read(&mut b)?;
        Ok(if self.big {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        })
    }

    fn u32(&mut self) -> Result<u32, String> {
        let mut b = [0u8; 4];
        self.read(&mut b)?;
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    /// One element header: (tag, VR when explicit, length).
    fn header(&mut self) -> Result<Header, String> {
        let tag = (self.u16()?, self.u16()?);
        if tag.0 == 0xFFFE || !self.explicit {
            return Ok((tag, None, self.u32()?));
        }
        let mut vr = [0u8; 2];
        self.read(&mut vr)?;
        // As dicom-rs reads it: a VR it does not know is UN, and only the VRs of PS3.5 Table
        // 7.1-2 have a 2-byte length; every other one a reserved field and a 4-byte length.
        if VR::from_binary(vr).is_none() {
            vr = *b"UN";
        }
        let long = !matches!(
            &vr,
            b"AE"
                | b"AS"
                | b"AT"
                | b"CS"
                | b"DA"
                | b"DS"
                | b"DT"
                | b"FL"
                | b"FD"
                | b"IS"
                | b"LO"
                | b"LT"
                | b"PN"
                | b"SH"
                | b"SL"
                | b"SS"
                | b"ST"
                | b"TM"
                | b"UI"
                | b"UL"
                | b"US"
        );
        let len = if long {
            self.skip(2)?;
            self.u32()?
        } else {
            u32::from(self.u16()?)
        };
        Ok((tag, Some(vr), len))
    }

    fn fits(&self, len: u32, tag: (u16, u16)) -> Result<(), String> {
        let left = self.size.saturating_sub(self.pos);
        if u64::from(len) > left {
            return Err(self.at(&format!(
                "element ({:04X},{:04X}) declares {len} bytes but only {left} remain (the file is \
                 cut short or damaged)",
                tag.0, tag.1
            )));
        }
        Ok(())
    }

    /// Whether an element with this tag and VR holds a sequence.
    fn is_sequence(&self, tag: (u16, u16), vr: Option<[u8; 2]>) -> bool {
        match vr {
            Some(v) => &v == b"SQ",
            None => StandardDataDictionary
                .by_tag(Tag(tag.0, tag.1))
                .is_some_and(|e| e.vr.relaxed() == VR::SQ),
        }
    }

    /// Elements up to `end` (a defined-length item; the file's end at depth 0), or up to an item
    /// delimiter (an undefined-length item).
    fn elements(&mut self, end: Option<u64>, depth: usize) -> Result<(), String> {
        loop {
            match end {
                Some(e) if self.pos >= e => return Ok(()),
                None if depth == 0 && self.pos + 4 > self.size => return Ok(()),
                _ => {}
            }
            let (tag, vr, len) = self.header()?;
            if tag == ITEM_END && end.is_none() && depth > 0 {
                return Ok(());
            }
            if tag.0 == 0xFFFE {
                return Err(self.at("a sequence delimiter outside its sequence"));
            }
            self.pixel_data |= depth == 0 && tag == PIXEL_DATA;
            if len == UNDEFINED {
                if tag == PIXEL_DATA {
                    self.fragments()?;
                } else if self.is_sequence(tag, vr) || vr.is_none() || vr == Some(*b"UN") {
                    self.sequence(None, depth + 1)?;
                } else {
                    return Err(self.at(&format!(
                        "element ({:04X},{:04X}) has an undefined length but is no sequence",
                        tag.0, tag.1
                    )));
                }
            } else {
                self.fits(len, tag)?;
                if self.is_sequence(tag, vr) {
                    let e = self.pos + u64::from(len);
                    self.sequence(Some(e), depth + 1)?;
                    if self.pos != e {
                        return Err(self.at("a sequence overruns its length"));
                    }
                } else {
                    self.skip(len)?;
                }
            }
        }
    }

    /// The items of a sequence, up to `end` or its delimiter.
    fn sequence(&mut self, end: Option<u64>, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(self.at(&format!("sequences nested more than {MAX_DEPTH} deep")));
        }
        loop {
            if let Some(e) = end
                && self.pos >= e
            {
                return Ok(());
            }
            let tag = (self.u16()?, self.u16()?);
            let len = self.u32()?;
            match tag {
                SEQ_END if end.is_none() => return Ok(()),
                ITEM if len == UNDEFINED => self.elements(None, depth)?,
                ITEM => {
                    self.fits(len, tag)?;
                    let e = self.pos + u64::from(len);
                    self.elements(Some(e), depth)?;
                    if self.pos != e {
                        return Err(self.at("an item overruns its length"));
                    }
                }
                _ => return Err(self.at("an element inside a sequence that is no item")),
            }
        }
    }

    /// Encapsulated pixel data: fragments of defined length up to the sequence delimiter.
    fn fragments(&mut self) -> Result<(), String> {
        loop {
            let tag = (self.u16()?, self.u16()?);
            let len = self.u32()?;
            match tag {
                SEQ_END => return Ok(()),
                ITEM if len != UNDEFINED => {
                    self.fits(len, tag)?;
                    self.skip(len)?;
                }
                _ => return Err(self.at("a pixel data fragment that is no item")),
            }
        }
    }
}
