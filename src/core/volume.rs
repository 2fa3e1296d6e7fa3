//! `Volume`: voxel data in f32, its grid and its place in the world.
//!
//! Arrays are C order, axis 0 slowest: a 3D volume is `[z, y, x]` (NIfTI `(k, j, i)`), a 2D image
//! is `[y, x]`. Channels (RGB, 4D NIfTI) are a separate leading dimension, so `data` holds
//! `channels` consecutive spatial arrays.

use std::fmt;

use super::labels::LabelValues;

/// How the voxels were stored on disk; kept so that `--dtype keep` and label maps can be written
/// back in their own type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    I64,
    U64,
    F32,
    F64,
}

impl DType {
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::U16 => "uint16",
            DType::I16 => "int16",
            DType::U32 => "uint32",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U64 => "uint64",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    pub fn is_integer(self) -> bool {
        !matches!(self, DType::F32 | DType::F64)
    }

    /// Rounds and clamps an f32 value into this type's range (as scipy does when it writes an
    /// interpolated value into an integer output array), returned as f64 for the writers.
    pub fn quantize(self, v: f32) -> f64 {
        let (lo, hi) = match self {
            DType::U8 => (0.0, u8::MAX as f64),
            DType::I8 => (i8::MIN as f64, i8::MAX as f64),
            DType::U16 => (0.0, u16::MAX as f64),
            DType::I16 => (i16::MIN as f64, i16::MAX as f64),
            DType::U32 => (0.0, u32::MAX as f64),
            DType::I32 => (i32::MIN as f64, i32::MAX as f64),
            DType::U64 => (0.0, u64::MAX as f64),
            DType::I64 => (i64::MIN as f64, i64::MAX as f64),
            DType::F32 | DType::F64 => return v as f64,
        };
        if v.is_nan() {
            return 0.0;
        }
        (v as f64).round().clamp(lo, hi)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A scan in memory: f32 voxels, spatial shape, channel count, spacing and affine.
#[derive(Clone)]
pub struct Volume {
    /// `channels * shape.iter().product()` values, channel-major, each channel C order.
    pub data: Vec<f32>,
    /// Spatial shape in array order (`[z, y, x]` or `[y, x]`).
    pub shape: Vec<usize>,
    /// Number of channels (1 for a scalar image, 3 for RGB).
    pub channels: usize,
    /// Voxel size in mm per spatial axis, in array order.
    pub spacing_mm: Vec<f64>,
    /// `world_from_voxel` for NIfTI-ordered voxel indices `(i, j, k) = (x, y, z)`, i.e. the
    /// reversed array index. Row-major 4x4.
    pub world_from_voxel: [[f64; 4]; 4],
    /// Storage type of the source file.
    pub dtype: DType,
    /// The NIfTI header the volume came from, so that a written file keeps every field.
    pub nifti_header: Option<Box<nifti::NiftiHeader>>,
    /// The 64-bit fields of a NIfTI-2 header the volume came from (`nifti_header` then holds
    /// them narrowed, with `sizeof_hdr` 540), so that it is written back as NIfTI-2 unchanged.
    pub nifti2: Option<Box<Nifti2Fields>>,
    /// Window centre and width from the file (DICOM), the GUI's default window/level.
    pub default_window: Option<(f64, f64)>,
    /// Whether the affine places the voxels in a patient's anatomy (NIfTI, DICOM), so that the
    /// views may name their edges; `.npy` and plain images have only the identity.
    pub oriented: bool,
    /// For a label map whose values f32 cannot all hold: `data` holds codes into this table of
    /// the exact values ([`LabelValues`]), which the writers turn back into the values.
    pub label_values: Option<std::sync::Arc<LabelValues>>,
}

impl fmt::Debug for Volume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Volume")
            .field("shape", &self.shape)
            .field("channels", &self.channels)
            .field("spacing_mm", &self.spacing_mm)
            .field("dtype", &self.dtype)
            .finish_non_exhaustive()
    }
}

impl Volume {
    /// A volume with unit spacing and an identity affine (up to the axis reversal of NIfTI).
    pub fn new(data: Vec<f32>, shape: Vec<usize>, channels: usize) -> Self {
        assert_eq!(
            data.len(),
            channels * shape.iter().product::<usize>(),
            "data length must equal channels * product(shape)"
        );
        let ndim = shape.len();
        Volume {
            data,
            shape,
            channels,
            spacing_mm: vec![1.0; ndim],
            world_from_voxel: identity4(),
            dtype: DType::F32,
            nifti_header: None,
            nifti2: None,
            default_window: None,
            oriented: false,
            label_values: None,
        }
    }

    /// The grid of a volume whose voxels live elsewhere (in device memory, for
    /// `CudaBackend::apply_device`): shape, channels, unit spacing and no data.
    pub fn grid(shape: Vec<usize>, channels: usize) -> Self {
        let mut v = Volume::new(Vec::new(), vec![0; shape.len()], channels);
        v.shape = shape;
        v
    }

    /// Number of spatial dimensions (2 or 3).
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Voxels per channel.
    pub fn len_spatial(&self) -> usize {
        self.shape.iter().product()
    }

    /// The voxels of one channel.
    pub fn channel(&self, c: usize) -> &[f32] {
        let n = self.len_spatial();
        &self.data[c * n..(c + 1) * n]
    }

    /// The minimum and maximum finite value (None if every value is NaN or infinite).
    pub fn finite_range(&self) -> Option<(f32, f32)> {
        let mut lo = f32::INFINITY;
        let mut hi = f32::NEG_INFINITY;
        for &v in &self.data {
            if v.is_finite() {
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
        (lo <= hi).then_some((lo, hi))
    }

    /// A volume with the same grid, header and affine but new data (same channel count).
    pub fn with_data(&self, data: Vec<f32>) -> Self {
        assert_eq!(data.len(), self.data.len());
        Volume {
            data,
            shape: self.shape.clone(),
            channels: self.channels,
            spacing_mm: self.spacing_mm.clone(),
            world_from_voxel: self.world_from_voxel,
            dtype: self.dtype,
            nifti_header: self.nifti_header.clone(),
            nifti2: self.nifti2.clone(),
            default_window: self.default_window,
            oriented: self.oriented,
            label_values: self.label_values.clone(),
        }
    }
}

/// Mirrors `data`, `channels` channels of `shape` each (channel-major, C order), along each
/// spatial axis of `axes`, in place.
pub fn flip_in_place(data: &mut [f32], shape: &[usize], channels: usize, axes: &[usize]) {
    let n: usize = shape.iter().product();
    for c in 0..channels {
        let ch = &mut data[c * n..(c + 1) * n];
        for &a in axes {
            let len = shape[a];
            let inner: usize = shape[a + 1..].iter().product();
            for line in ch.chunks_exact_mut(len * inner) {
                for i in 0..len / 2 {
                    let (head, tail) = line.split_at_mut((len - 1 - i) * inner);
                    head[i * inner..(i + 1) * inner].swap_with_slice(&mut tail[..inner]);
                }
            }
        }
    }
}

pub fn identity4() -> [[f64; 4]; 4] {
    let mut m = [[0.0; 4]; 4];
    for (i, row) in m.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    m
}

impl Volume {
    /// Everything but the voxels (an empty `data`), for building an output volume.
    pub fn clone_meta(&self) -> Self {
        Volume {
            data: vec![],
            shape: self.shape.clone(),
            channels: self.channels,
            spacing_mm: self.spacing_mm.clone(),
            world_from_voxel: self.world_from_voxel,
            dtype: self.dtype,
            nifti_header: self.nifti_header.clone(),
            nifti2: self.nifti2.clone(),
            default_window: self.default_window,
            oriented: self.oriented,
            label_values: self.label_values.clone(),
        }
    }
}

impl Volume {
    /// The world position in mm (RAS+) of array index `index` (`[z, y, x]` or `[y, x]`).
    pub fn world_mm(&self, index: &[usize]) -> [f64; 3] {
        let m = &self.world_from_voxel;
        let ijk: Vec<f64> = index.iter().rev().map(|&i| i as f64).collect();
        let mut out = [0.0; 3];
        for (w, row) in m.iter().take(3).enumerate() {
            out[w] = row[3] + ijk.iter().enumerate().map(|(i, v)| row[i] * v).sum::<f64>();
        }
        out
    }

    /// Whether the channels are the red, green and blue of a colour image (PNG/JPEG/TIFF, NIfTI
    /// RGB24), drawn together; other channels (4D NIfTI volumes) are shown one at a time.
    pub fn is_colour(&self) -> bool {
        const NIFTI_RGB24: i16 = 128;
        self.channels == 3
            && self
                .nifti_header
                .as_ref()
                .is_none_or(|h| h.datatype == NIFTI_RGB24)
    }

    /// The orientation as a user reads it: the axis codes (`RAS`, see [`Volume::axis_codes`]) of
    /// a volume in a patient's space (NIfTI, DICOM), and `None` for a plain array or image,
    /// whose identity affine names no anatomy.
    pub fn orientation(&self) -> Option<String> {
        self.oriented
            .then(|| self.axis_codes().into_iter().collect())
    }

    /// Anatomical direction codes of the NIfTI voxel axes `(i, j, k)` (nibabel's `aff2axcodes`):
    /// the letter each axis points towards in RAS+ world space, e.g. `['R', 'A', 'S']`.
    /// Array axis `a` of a 3D volume is NIfTI axis `2 - a`.
    pub fn axis_codes(&self) -> Vec<char> {
        let nd = self.ndim();
        let m = &self.world_from_voxel;
        let mut used = [false; 3];
        let mut codes = Vec::with_capacity(nd);
        for i in 0..nd.min(3) {
            // The world axis this voxel axis moves along most, not taken by an earlier axis.
            let mut best = None;
            for (w, row) in m.iter().take(3).enumerate() {
                if used[w] {
                    continue;
                }
                let v = row[i];
                if best.is_none_or(|(_, b): (usize, f64)| v.abs() > b.abs()) {
                    best = Some((w, v));
                }
            }
            let Some((w, v)) = best else { break };
            used[w] = true;
            let (pos, neg) = [('R', 'L'), ('A', 'P'), ('S', 'I')][w];
            codes.push(if v >= 0.0 { pos } else { neg });
        }
        codes
    }
}

/// The numeric fields of a NIfTI header at NIfTI-2 width: 64-bit dims, offsets, slice indices
/// and floats, 32-bit codes. Every NIfTI-1 value fits exactly, so reading and writing work on this
/// form for both versions. A volume read from a NIfTI-2 file keeps it in `Volume::nifti2`, beside
/// the narrowed [`nifti::NiftiHeader`] (`sizeof_hdr` 540, magic `n+2`), so that it is written back as
/// NIfTI-2 without losing precision. The text fields (descrip, aux_file, intent_name) and
/// dim_info are those of the [`nifti::NiftiHeader`].
#[derive(Clone, Debug, PartialEq)]
pub struct Nifti2Fields {
    pub datatype: i16,
    pub bitpix: i16,
    /// Signed, as in the file: a negative dim is reported, not wrapped.
    pub dim: [i64; 8],
    pub intent_p: [f64; 3],
    pub pixdim: [f64; 8],
    pub vox_offset: i64,
    pub scl_slope: f64,
    pub scl_inter: f64,
    pub cal_max: f64,
    pub cal_min: f64,
    pub slice_duration: f64,
    pub toffset: f64,
    pub slice_start: i64,
    pub slice_end: i64,
    pub qform_code: i32,
    pub sform_code: i32,
    /// quatern_b, quatern_c, quatern_d.
    pub quatern: [f64; 3],
    /// qoffset_x, qoffset_y, qoffset_z.
    pub qoffset: [f64; 3],
    pub srow: [[f64; 4]; 3],
    pub slice_code: i32,
    pub xyzt_units: i32,
    pub intent_code: i32,
}

#[cfg(test)]
mod tests {
    use super::flip_in_place;

    /// Each voxel lands at its mirror image along the flipped axes, per channel.
    #[test]
    fn a_flip_moves_each_voxel_to_its_mirror_image() {
        for (shape, axes) in [
            (vec![3usize, 4, 5], vec![0usize]),
            (vec![3, 4, 5], vec![1, 2]),
            (vec![3, 4, 5], vec![0, 1, 2]),
            (vec![4, 5], vec![1]),
            (vec![4, 5], vec![0, 1]),
        ] {
            let n: usize = shape.iter().product();
            let data: Vec<f32> = (0..2 * n).map(|i| i as f32).collect();
            let mut got = data.clone();
            flip_in_place(&mut got, &shape, 2, &axes);
            for c in 0..2 {
                for i in 0..n {
                    // The index of voxel i, mirrored along `axes`.
                    let mut rest = i;
                    let mut j = 0;
                    for (a, &d) in shape.iter().enumerate() {
                        let stride: usize = shape[a + 1..].iter().product();
                        let k = rest / stride;
                        rest %= stride;
                        let k = if axes.contains(&a) { d - 1 - k } else { k };
                        j += k * stride;
                    }
                    assert_eq!(got[c * n + j], data[c * n + i], "{shape:?} {axes:?}");
                }
            }
        }
    }
}
