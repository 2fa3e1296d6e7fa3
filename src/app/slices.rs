//! Planes of a volume as the screen shows them: which array axes run across and down a view,
//! named anatomically from the affine (radiological convention, as 3D Slicer: the patient's right
//! on the screen's left; anterior up in axial, superior up in coronal and sagittal; anterior left in
//! sagittal), and slice extraction into display order. Arrays are `[z, y, x]`.

use std::sync::Arc;

use crate::core::volume::Volume;

/// One view of a volume: the plane normal to `normal` (3D) or the whole image (2D).
#[derive(Clone, Debug, PartialEq)]
pub struct ViewGeom {
    pub name: String,
    /// The array axis normal to the plane; `None` for a 2D image.
    pub normal: Option<usize>,
    /// Array axis that runs left to right on screen, and whether its index decreases that way.
    pub across: usize,
    pub across_flip: bool,
    /// Array axis that runs top to bottom on screen, and whether its index decreases that way.
    pub down: usize,
    pub down_flip: bool,
    /// Orientation letters at the left, right, top and bottom edges (empty for plain images).
    pub letters: [String; 4],
}

/// World axis (0 R-L, 1 A-P, 2 S-I) of an orientation letter.
fn world_axis(c: char) -> usize {
    match c {
        'R' | 'L' => 0,
        'A' | 'P' => 1,
        _ => 2,
    }
}

fn opposite(c: char) -> char {
    match c {
        'R' => 'L',
        'L' => 'R',
        'A' => 'P',
        'P' => 'A',
        'S' => 'I',
        _ => 'S',
    }
}

/// The views of a volume: axial, coronal and sagittal for 3D, one view for 2D.
pub fn views(vol: &Volume) -> Vec<ViewGeom> {
    if vol.ndim() != 3 {
        // A 2D image as stored (rows down, columns right), its edges named when the affine is
        // anatomical (a DICOM slice).
        let codes = vol.axis_codes();
        let letters = match (vol.oriented, codes.as_slice()) {
            (true, [across, down, ..]) => [
                opposite(*across).to_string(),
                across.to_string(),
                opposite(*down).to_string(),
                down.to_string(),
            ],
            _ => Default::default(),
        };
        return vec![ViewGeom {
            name: "Image".into(),
            normal: None,
            across: 1,
            across_flip: false,
            down: 0,
            down_flip: false,
            letters,
        }];
    }
    if !vol.oriented {
        // No anatomy to name (`.npy`): the array's own planes, unflipped.
        return array_views();
    }
    let codes = vol.axis_codes();
    // Letter each array axis points towards (array axis a = NIfTI axis 2 - a).
    let toward: Vec<char> = (0..3)
        .map(|a| codes.get(2 - a).copied().unwrap_or(['S', 'A', 'R'][a]))
        .collect();
    let axis_of = |world: usize| (0..3).find(|&a| world_axis(toward[a]) == world);
    // (name, normal world axis, across: letter the screen's right goes toward, down: letter the
    // screen's bottom goes toward)
    let specs = [
        ("Axial", 2, 'L', 'P'),
        ("Coronal", 1, 'L', 'I'),
        ("Sagittal", 0, 'P', 'I'),
    ];
    let mut out = Vec::new();
    for (name, normal_w, right, bottom) in specs {
        let (Some(n), Some(h), Some(v)) = (
            axis_of(normal_w),
            axis_of(world_axis(right)),
            axis_of(world_axis(bottom)),
        ) else {
            // Codes that do not name three distinct world axes: fall back to array planes.
            return array_views();
        };
        out.push(ViewGeom {
            name: name.into(),
            normal: Some(n),
            across: h,
            across_flip: toward[h] != right,
            down: v,
            down_flip: toward[v] != bottom,
            letters: [
                opposite(right).to_string(),
                right.to_string(),
                opposite(bottom).to_string(),
                bottom.to_string(),
            ],
        });
    }
    out
}

fn array_views() -> Vec<ViewGeom> {
    (0..3)
        .map(|n| {
            let rest: Vec<usize> = (0..3).filter(|&a| a != n).collect();
            ViewGeom {
                name: format!("Axis {n}"),
                normal: Some(n),
                across: rest[1],
                across_flip: false,
                down: rest[0],
                down_flip: false,
                letters: Default::default(),
            }
        })
        .collect()
}

/// A slice in display order: `channels` planes of `height` rows of `width` values, stacked
/// vertically (rows top to bottom), plus the physical size of a pixel.
#[derive(Clone, Debug, PartialEq)]
pub struct DisplaySlice {
    pub width: usize,
    pub height: usize,
    pub channels: usize,
    pub data: Vec<f32>,
    /// Millimetres per pixel across and down.
    pub pixel_mm: [f32; 2],
    /// Unique per content, so the renderer uploads a texture only when it changes.
    pub id: u64,
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A slice like `like` (size, channels, pixel size) holding `data`, with a new content id.
pub fn with_data(like: &DisplaySlice, data: Vec<f32>) -> Arc<DisplaySlice> {
    Arc::new(DisplaySlice {
        data,
        id: next_id(),
        ..*like
    })
}

/// The plane of `view` at `index` along its normal, from a full volume's data.
pub fn extract(
    data: &[f32],
    shape: &[usize],
    channels: usize,
    spacing_mm: &[f64],
    view: &ViewGeom,
    index: usize,
) -> Arc<DisplaySlice> {
    let nd = shape.len();
    let n: usize = shape.iter().product();
    let (w, h) = (shape[view.across], shape[view.down]);
    let mut strides = vec![1usize; nd];
    for a in (0..nd.saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * shape[a + 1];
    }
    let base = view
        .normal
        .map_or(0, |a| index.min(shape[a].saturating_sub(1)) * strides[a]);
    let (sx, sy) = (strides[view.across], strides[view.down]);
    let mut out = vec![0f32; w * h * channels];
    for c in 0..channels {
        let ch = &data[c * n..(c + 1) * n];
        for row in 0..h {
            let y = if view.down_flip { h - 1 - row } else { row };
            let dst = &mut out[(c * h + row) * w..(c * h + row + 1) * w];
            for (col, d) in dst.iter_mut().enumerate() {
                let x = if view.across_flip { w - 1 - col } else { col };
                *d = ch[base + y * sy + x * sx];
            }
        }
    }
    let mm = |a: usize| spacing_mm.get(a).copied().unwrap_or(1.0).abs().max(1e-6) as f32;
    Arc::new(DisplaySlice {
        width: w,
        height: h,
        channels,
        data: out,
        pixel_mm: [mm(view.across), mm(view.down)],
        id: next_id(),
    })
}

/// A plane from a slice computed on its own: `slice` holds the array-order plane normal to
/// `view.normal` (the two remaining axes in increasing order), channels leading.
pub fn extract_from_plane(
    slice: &[f32],
    vol_shape: &[usize],
    channels: usize,
    spacing_mm: &[f64],
    view: &ViewGeom,
) -> Arc<DisplaySlice> {
    let Some(normal) = view.normal else {
        return extract(slice, vol_shape, channels, spacing_mm, view, 0);
    };
    let mut shape = vol_shape.to_vec();
    shape[normal] = 1;
    extract(slice, &shape, channels, spacing_mm, view, 0)
}

/// The value at `q` of the sorted-order statistics (0..1) of a sample of `data`'s finite values.
pub fn percentiles(data: &[f32], qs: &[f64]) -> Vec<f32> {
    const MAX_SAMPLES: usize = 1 << 20;
    let step = (data.len() / MAX_SAMPLES).max(1);
    let mut v: Vec<f32> = data
        .iter()
        .step_by(step)
        .copied()
        .filter(|x| x.is_finite())
        .collect();
    if v.is_empty() {
        return qs.iter().map(|_| 0.0).collect();
    }
    v.sort_unstable_by(f32::total_cmp);
    qs.iter()
        .map(|q| v[((q.clamp(0.0, 1.0) * (v.len() - 1) as f64).round()) as usize])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::volume::identity4;

    fn vol_with(codes_affine: [[f64; 4]; 4]) -> Volume {
        let mut v = Volume::new(vec![0.0; 2 * 3 * 4], vec![2, 3, 4], 1);
        v.world_from_voxel = codes_affine;
        v.oriented = true;
        v
    }

    #[test]
    fn an_unoriented_volume_shows_array_planes_without_letters() {
        let v = Volume::new(vec![0.0; 2 * 3 * 4], vec![2, 3, 4], 1);
        let vs = views(&v);
        assert_eq!(vs[0].name, "Axis 0");
        assert!(vs.iter().all(|g| g.letters.iter().all(String::is_empty)));
        assert!(vs.iter().all(|g| !g.across_flip && !g.down_flip));
        let img = Volume::new(vec![0.0; 6], vec![2, 3], 1);
        assert!(views(&img)[0].letters.iter().all(String::is_empty));
    }

    #[test]
    fn an_oriented_2d_slice_names_its_edges() {
        // A DICOM axial slice: columns toward L (LPS +x), rows toward P.
        let mut m = identity4();
        m[0][0] = -1.0;
        m[1][1] = -1.0;
        let mut img = Volume::new(vec![0.0; 6], vec![2, 3], 1);
        img.world_from_voxel = m;
        img.oriented = true;
        assert_eq!(
            views(&img)[0].letters,
            ["R", "L", "A", "P"].map(String::from)
        );
    }

    #[test]
    fn ras_volume_is_radiological() {
        let v = vol_with(identity4());
        let vs = views(&v);
        assert_eq!(vs[0].name, "Axial");
        assert_eq!(vs[0].normal, Some(0));
        // x (array axis 2) points R: the screen's right is L, so x decreases to the right.
        assert_eq!((vs[0].across, vs[0].across_flip), (2, true));
        // y points A: the screen's bottom is P, so y decreases downwards.
        assert_eq!((vs[0].down, vs[0].down_flip), (1, true));
        assert_eq!(vs[0].letters, ["R", "L", "A", "P"].map(String::from));
        assert_eq!(vs[2].name, "Sagittal");
        assert_eq!((vs[2].across, vs[2].across_flip), (1, true));
        assert_eq!((vs[2].down, vs[2].down_flip), (0, true));
    }

    #[test]
    fn las_volume_is_not_mirrored() {
        let mut m = identity4();
        m[0][0] = -1.0;
        let vs = views(&vol_with(m));
        assert_eq!((vs[0].across, vs[0].across_flip), (2, false));
    }

    #[test]
    fn extract_orders_rows_top_down() {
        // [z, y, x] = [1, 2, 3], values = linear index.
        let data: Vec<f32> = (0..6).map(|i| i as f32).collect();
        let view = ViewGeom {
            name: "t".into(),
            normal: Some(0),
            across: 2,
            across_flip: true,
            down: 1,
            down_flip: true,
            letters: Default::default(),
        };
        let s = extract(&data, &[1, 2, 3], 1, &[1.0, 1.0, 1.0], &view, 0);
        assert_eq!(s.data, vec![5.0, 4.0, 3.0, 2.0, 1.0, 0.0]);
    }

    #[test]
    fn percentiles_of_a_ramp() {
        let d: Vec<f32> = (0..=100).map(|i| i as f32).collect();
        assert_eq!(percentiles(&d, &[0.0, 0.5, 1.0]), vec![0.0, 50.0, 100.0]);
    }
}
