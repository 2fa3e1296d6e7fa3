//! PNG, JPEG and TIFF images through the `image` crate.
//!
//! An image is 2D, `[y, x]` (row 0 at the top, as PIL and numpy see it); colour is channels
//! (docs/design.md §2). Spacing is 1 and the affine the identity, since these formats carry no geometry.

use std::path::Path;

use image::{DynamicImage, ImageBuffer, ImageReader, Luma, Rgb};

use super::{IoError, atomic_write};
use crate::core::volume::{DType, Volume};

const FORMAT: &str = "image";
const PNG: &str = "PNG";

/// Most a decoder may allocate. The `image` crate's default (512 MiB) would refuse a 16-bit RGB
/// image of 10 000 × 10 000 pixels, which is a plausible slide or fundus mosaic.
const MAX_DECODE_BYTES: u64 = 4 << 30;
/// Most decoded bytes per byte of file. No codec of these formats gets near it on real images
/// (deflate tops out at 1032:1, LZW at about 2700:1), so a header that claims more pixels than
/// its file could encode is refused before anything is allocated.
const MAX_EXPANSION: u64 = 4096;
/// Below this a file's size does not limit its image.
const MIN_DECODE_BYTES: u64 = 256 << 20;

/// What a decoder may allocate for a file of `file_len` bytes.
fn decode_budget(file_len: u64) -> u64 {
    file_len
        .saturating_mul(MAX_EXPANSION)
        .clamp(MIN_DECODE_BYTES, MAX_DECODE_BYTES)
}

/// Reads a PNG, JPEG or TIFF (the format is recognised from the content, else the extension).
/// Gray 8/16-bit → one channel, RGB(A) 8/16-bit → three channels (alpha dropped), with dtype
/// `uint8` or `uint16`; 32-bit float RGB(A) TIFFs come back as `float32`, and gray 32/64-bit
/// TIFFs (float, signed or unsigned: what microscopy and dose maps use) as one channel of their
/// own dtype. Values are those of `numpy.asarray(PIL.Image.open(p))` (for JPEG up to the ±1
/// differences between decoders' IDCTs; 64-bit values are held as f32).
pub fn read(path: &Path) -> Result<Volume, IoError> {
    let err = |why: String| IoError::read(FORMAT, one_line(&why), path);
    let budget = decode_budget(
        std::fs::metadata(path)
            .map_err(|e| err(e.to_string()))?
            .len(),
    );
    let mut reader = ImageReader::open(path)
        .map_err(|e| err(e.to_string()))?
        .with_guessed_format()
        .map_err(|e| err(e.to_string()))?;
    if reader.format() == Some(image::ImageFormat::Tiff)
        && let Some(v) = read_wide_gray_tiff(path, budget).map_err(err)?
    {
        return Ok(v);
    }
    if reader.format() == Some(image::ImageFormat::Jpeg) {
        // The JPEG decoder fills a scan cut short with grey: a partial image would pass as whole.
        let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
        jpeg_is_whole(&bytes).map_err(err)?;
    }
    // The header's pixel count against what the file could encode, before any decoder
    // allocates (at least one byte per pixel).
    if let Ok((w, h)) = ImageReader::open(path)
        .and_then(|r| r.with_guessed_format())
        .map_err(image::ImageError::IoError)
        .and_then(|r| r.into_dimensions())
        && (w as u64).saturating_mul(h as u64) > budget
    {
        return Err(err(format!(
            "the header claims {w} x {h} pixels, more than a file of {} bytes can hold",
            std::fs::metadata(path).map_or(0, |m| m.len())
        )));
    }
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(budget);
    reader.limits(limits);
    // The decoders are meant to return errors on bad input; a panic in one of them must still
    // not take the application down with it.
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reader.decode()))
        .map_err(|_| err("the image decoder crashed on this file".into()))?
        .map_err(|e| err(e.to_string()))?;
    let (w, h) = (decoded.width() as usize, decoded.height() as usize);
    if w == 0 || h == 0 {
        return Err(err(format!("the image is empty ({w} x {h})")));
    }
    let (data, channels, dtype) = planes(decoded);
    let mut v = Volume::new(data, vec![h, w], channels);
    v.dtype = dtype;
    Ok(v)
}

/// A gray TIFF of 32- or 64-bit samples (which the image crate refuses), through the tiff
/// crate; `None` for a TIFF the image crate reads, and an error in words for any other.
fn read_wide_gray_tiff(path: &Path, budget: u64) -> Result<Option<Volume>, String> {
    use tiff::decoder::{Decoder, DecodingResult, Limits};
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut dec = Decoder::new(std::io::BufReader::new(file))
        .map_err(|e| e.to_string())?
        .with_limits({
            let mut l = Limits::default();
            l.decoding_buffer_size = usize::try_from(budget).unwrap_or(usize::MAX);
            l
        });
    match dec.colortype().map_err(|e| e.to_string())? {
        tiff::ColorType::Gray(32 | 64) => {}
        colour => {
            // The image crate's own refusals print the colour type as a Rust structure.
            image_crate_reads(&mut dec, colour)?;
            return Ok(None);
        }
    }
    let (w, h) = dec.dimensions().map_err(|e| e.to_string())?;
    let (w, h) = (w as usize, h as usize);
    if w == 0 || h == 0 {
        return Err(format!("the image is empty ({w} x {h})"));
    }
    let (data, dtype): (Vec<f32>, DType) = match dec.read_image().map_err(|e| e.to_string())? {
        DecodingResult::F32(v) => (v, DType::F32),
        DecodingResult::F64(v) => (v.into_iter().map(|x| x as f32).collect(), DType::F64),
        DecodingResult::U32(v) => (v.into_iter().map(|x| x as f32).collect(), DType::U32),
        DecodingResult::I32(v) => (v.into_iter().map(|x| x as f32).collect(), DType::I32),
        DecodingResult::U64(v) => (v.into_iter().map(|x| x as f32).collect(), DType::U64),
        DecodingResult::I64(v) => (v.into_iter().map(|x| x as f32).collect(), DType::I64),
        _ => return Ok(None),
    };
    if data.len() != w * h {
        return Err(format!(
            "{} samples for a {w} x {h} gray image (the file is damaged)",
            data.len()
        ));
    }
    let mut v = Volume::new(data, vec![h, w], 1);
    v.dtype = dtype;
    Ok(Some(v))
}

/// What TIFFs the image crate decodes (its `TiffDecoder::new`): 1, 8 or 16-bit gray, gray and
/// alpha, RGB, RGBA or CMYK of 8 or 16 bits of unsigned integers, and RGB(A) of 32-bit floats;
/// any other TIFF is an error that says what the file holds in words.
fn image_crate_reads<R: std::io::Read + std::io::Seek>(
    dec: &mut tiff::decoder::Decoder<R>,
    colour: tiff::ColorType,
) -> Result<(), String> {
    use tiff::ColorType as C;
    const EXPECTED: &str = "expected 1 (gray), 2 (gray and alpha), 3 (RGB) or 4 (RGBA or CMYK) \
                            samples per pixel of 8 or 16 bits, RGB(A) of 32-bit floats, or gray \
                            of 32 or 64 bits";
    let what = match colour {
        C::Gray(1 | 8 | 16)
        | C::GrayA(8 | 16)
        | C::RGB(8 | 16 | 32)
        | C::RGBA(8 | 16 | 32)
        | C::CMYK(8 | 16) => None,
        C::Gray(b) => Some(format!("gray samples of {b} bits")),
        C::GrayA(b) => Some(format!("gray and alpha samples of {b} bits")),
        C::RGB(b) => Some(format!("RGB samples of {b} bits")),
        C::RGBA(b) => Some(format!("RGBA samples of {b} bits")),
        C::CMYK(b) => Some(format!("CMYK samples of {b} bits")),
        C::CMYKA(b) => Some(format!("CMYK and alpha samples of {b} bits")),
        C::Palette(b) => Some(format!("a colour palette (indexed colour) of {b} bits")),
        C::YCbCr(b) => Some(format!("YCbCr colour of {b} bits")),
        C::Lab(b) => Some(format!("CIE L*a*b* colour of {b} bits")),
        C::Multiband {
            bit_depth,
            num_samples,
        } => Some(format!(
            "{num_samples} samples per pixel of {bit_depth} bits"
        )),
        _ => Some("a colour type augscope does not know".to_string()),
    };
    if let Some(what) = what {
        return Err(format!("TIFF with {what} is not supported; {EXPECTED}"));
    }
    // Unsigned integers of up to 16 bits, or 32-bit floats, as the image crate checks.
    let bits = colour.bit_depth();
    let formats = dec
        .find_tag_unsigned_vec::<u16>(tiff::tags::Tag::SampleFormat)
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    for f in formats {
        match (f, bits) {
            (1, ..=16) | (3, 32) => {}
            _ => {
                let kind = match f {
                    1 => "unsigned integer".to_string(),
                    2 => "signed integer".to_string(),
                    3 => "floating-point".to_string(),
                    4 => "untyped".to_string(),
                    n => format!("unknown (format code {n})"),
                };
                return Err(format!(
                    "TIFF with {kind} samples of {bits} bits is not supported; {EXPECTED} \
                     (unsigned, or floats where 32 bits)"
                ));
            }
        }
    }
    Ok(())
}

/// Whether a JPEG's last scan is followed by its end-of-image marker (FF D9). Entropy-coded data
/// never holds FF D9 (a data byte FF is stuffed as FF 00), so a file cut inside or right after its
/// last scan has none after the last start-of-scan (FF DA); an embedded thumbnail's EOI comes
/// before it.
pub fn jpeg_is_whole(bytes: &[u8]) -> Result<(), String> {
    let last = |marker: u8| bytes.windows(2).rposition(|w| w == [0xFF, marker]);
    match (last(0xDA), last(0xD9)) {
        (Some(sos), Some(eoi)) if eoi > sos => Ok(()),
        (None, _) => Err("the JPEG has no image data (no start-of-scan marker)".into()),
        _ => Err("the JPEG is cut short (its image data has no end-of-image marker)".into()),
    }
}

/// Decoder messages in one line and in words: the png crate prints a chunk's type as a Rust
/// structure (`ChunkType { type: IHDR, critical: true, … }`), shown here as `IHDR`, and the tiff
/// crate its colour types and codes (`Multiband { bit_depth: 8, num_samples: 5 }`, `RGB(8)`,
/// `Unknown(7)`), shown as words (see [`tiff_words`]).
fn one_line(s: &str) -> String {
    let s = tiff_words(s);
    let mut s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    while let Some(i) = s.find("ChunkType { type: ") {
        let rest = &s[i + "ChunkType { type: ".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        let end = rest
            .find('}')
            .map_or(s.len(), |j| i + "ChunkType { type: ".len() + j + 1);
        s.replace_range(i..end, &name);
    }
    s
}

/// The tiff crate's colour types and unknown codes, as its messages print them (Rust's debug
/// form), in words: `Multiband { bit_depth: 8, num_samples: 5 }` is "5 samples per pixel of 8
/// bits", `RGB(16)` "RGB of 16 bits", `Unknown(7)` "code 7".
fn tiff_words(s: &str) -> String {
    const MULTIBAND: &str = "Multiband { bit_depth: ";
    let mut s = s.to_string();
    while let Some(i) = s.find(MULTIBAND) {
        let Some(len) = s[i..].find('}') else { break };
        let inner = &s[i + "Multiband { ".len()..i + len];
        let field = |key: &str| {
            inner
                .split(", ")
                .find_map(|kv| kv.strip_prefix(key))
                .unwrap_or("?")
                .trim()
                .to_string()
        };
        let words = format!(
            "{} samples per pixel of {} bits",
            field("num_samples: "),
            field("bit_depth: ")
        );
        s.replace_range(i..=i + len, &words);
    }
    for (name, words) in [
        ("GrayA", "gray and alpha of"),
        ("Gray", "gray of"),
        ("RGBA", "RGBA of"),
        ("RGB", "RGB of"),
        ("CMYKA", "CMYK and alpha of"),
        ("CMYK", "CMYK of"),
        ("YCbCr", "YCbCr of"),
        ("Palette", "palette colour of"),
        ("Lab", "CIE L*a*b* of"),
        ("Unknown", "code"),
    ] {
        let pat = format!("{name}(");
        let mut from = 0;
        while let Some(j) = s[from..].find(&pat).map(|j| from + j) {
            let start = j + pat.len();
            let digits = s[start..].chars().take_while(char::is_ascii_digit).count();
            let whole_word = !s[..j].ends_with(|c: char| c.is_ascii_alphanumeric());
            if digits == 0 || !whole_word || !s[start + digits..].starts_with(')') {
                from = start;
                continue;
            }
            let n = s[start..start + digits].to_string();
            let unit = if name == "Unknown" { "" } else { " bits" };
            let text = format!("{words} {n}{unit}");
            s.replace_range(j..start + digits + 1, &text);
            from = j + text.len();
        }
    }
    s
}

/// Splits interleaved pixels into channel planes.
fn split<T: Copy + Into<f64>>(px: &[T], stride: usize, keep: usize) -> Vec<f32> {
    let n = px.len() / stride;
    let mut out = Vec::with_capacity(n * keep);
    for c in 0..keep {
        out.extend(px.chunks_exact(stride).map(|p| p[c].into() as f32));
    }
    out
}

fn planes(img: DynamicImage) -> (Vec<f32>, usize, DType) {
    match img {
        DynamicImage::ImageLuma8(b) => (split(b.as_raw(), 1, 1), 1, DType::U8),
        DynamicImage::ImageLumaA8(b) => (split(b.as_raw(), 2, 1), 1, DType::U8),
        DynamicImage::ImageRgb8(b) => (split(b.as_raw(), 3, 3), 3, DType::U8),
        DynamicImage::ImageRgba8(b) => (split(b.as_raw(), 4, 3), 3, DType::U8),
        DynamicImage::ImageLuma16(b) => (split(b.as_raw(), 1, 1), 1, DType::U16),
        DynamicImage::ImageLumaA16(b) => (split(b.as_raw(), 2, 1), 1, DType::U16),
        DynamicImage::ImageRgb16(b) => (split(b.as_raw(), 3, 3), 3, DType::U16),
        DynamicImage::ImageRgba16(b) => (split(b.as_raw(), 4, 3), 3, DType::U16),
        DynamicImage::ImageRgb32F(b) => (split(b.as_raw(), 3, 3), 3, DType::F32),
        DynamicImage::ImageRgba32F(b) => (split(b.as_raw(), 4, 3), 3, DType::F32),
        other => (split(other.to_rgb32f().as_raw(), 3, 3), 3, DType::F32),
    }
}

/// Writes a 2D, 1- or 3-channel volume as PNG: 8-bit if its dtype is `uint8`, 16-bit if
/// `uint16` (values rounded and clamped), and for any other dtype 16-bit only when every value
/// is an integer in 0..=65535 (else an error: PNG cannot hold the values, .nii or .npy can).
pub fn write_png(path: &Path, vol: &Volume) -> Result<(), IoError> {
    let err = |why: String| IoError::write(PNG, why, path);
    let [h, w] = vol.shape[..] else {
        return Err(err(format!(
            "PNG holds 2D images; this volume has shape {:?} (write .nii or .npy instead)",
            vol.shape
        )));
    };
    if vol.channels != 1 && vol.channels != 3 {
        return Err(err(format!(
            "PNG needs 1 or 3 channels, the image has {}",
            vol.channels
        )));
    }
    if vol.data.len() != vol.channels * h * w {
        return Err(err(format!(
            "{} values do not fill {h} x {w} x {} channels",
            vol.data.len(),
            vol.channels
        )));
    }
    let (Ok(w32), Ok(h32)) = (u32::try_from(w), u32::try_from(h)) else {
        return Err(err(format!("{h} x {w} is too large for PNG")));
    };
    if w == 0 || h == 0 {
        return Err(err(format!("the image is empty ({h} x {w})")));
    }
    let eight_bit = match vol.dtype {
        DType::U8 => true,
        DType::U16 => false,
        other => {
            if let Some(v) = vol
                .data
                .iter()
                .find(|v| !(v.fract() == 0.0 && (0.0..=65535.0).contains(*v)))
            {
                return Err(err(format!(
                    "{other} value {v} cannot be stored in PNG (integers 0 to 65535 only); \
                     write .nii or .npy to keep the values"
                )));
            }
            false
        }
    };
    let n = h * w;
    let interleave = |q: &dyn Fn(f32) -> f64| -> Vec<f64> {
        let mut out = Vec::with_capacity(n * vol.channels);
        for i in 0..n {
            for c in 0..vol.channels {
                out.push(q(vol.data[c * n + i]));
            }
        }
        out
    };
    let encoded: DynamicImage = if eight_bit {
        let px: Vec<u8> = interleave(&|v| DType::U8.quantize(v))
            .into_iter()
            .map(|v| v as u8)
            .collect();
        if vol.channels == 1 {
            ImageBuffer::<Luma<u8>, _>::from_raw(w32, h32, px).map(DynamicImage::ImageLuma8)
        } else {
            ImageBuffer::<Rgb<u8>, _>::from_raw(w32, h32, px).map(DynamicImage::ImageRgb8)
        }
    } else {
        let px: Vec<u16> = interleave(&|v| DType::U16.quantize(v))
            .into_iter()
            .map(|v| v as u16)
            .collect();
        if vol.channels == 1 {
            ImageBuffer::<Luma<u16>, _>::from_raw(w32, h32, px).map(DynamicImage::ImageLuma16)
        } else {
            ImageBuffer::<Rgb<u16>, _>::from_raw(w32, h32, px).map(DynamicImage::ImageRgb16)
        }
    }
    .ok_or_else(|| err("pixel buffer does not match the image size".into()))?;
    atomic_write(path, PNG, |out| {
        let enc = image::codecs::png::PngEncoder::new(out);
        encoded
            .write_with_encoder(enc)
            .map_err(|e| std::io::Error::other(one_line(&e.to_string())))
    })
}

#[cfg(test)]
mod tests {
    use super::tiff_words;

    #[test]
    fn tiff_debug_forms_read_as_words() {
        assert_eq!(
            tiff_words("Unhandled TIFF color type Multiband { bit_depth: 8, num_samples: 257 }"),
            "Unhandled TIFF color type 257 samples per pixel of 8 bits"
        );
        assert_eq!(
            tiff_words("predictor for RGB(8) and GrayA(16), compression Unknown(7)"),
            "predictor for RGB of 8 bits and gray and alpha of 16 bits, compression code 7"
        );
        assert_eq!(tiff_words("sRGB(8) RGB(x) Gray("), "sRGB(8) RGB(x) Gray(");
    }
}
