//! TorchIO transforms.
//!
//! TorchIO's own `RandomAffine` turns, scales and shifts about world (RAS) axes and the image
//! centre, so one set of angles does different things to scans stored in different orientations.
//! The snippet therefore carries two small subclasses of TorchIO's transforms: `ArrayAxisAffine`
//! (a `tio.Affine` whose SimpleITK transform is augscope's array-axis map taken through the
//! image's affine, exact for any orientation) and `RandomArrayAxisAffine` (draws as augscope's
//! preset sampling), plus `RandomAlphaSigmaElastic` (TorchIO's B-spline deformation scaled to
//! augscope's alpha and sigma). `tests/interop/check_torchio.py` runs them under TorchIO.

use super::{
    Preset, Range, ScaleDistribution, Space, Target, Unit, axis_value, f, header,
    intensity_left_out, notes_block, pair, rot_range, tuple_of_pairs,
};
use std::fmt::Write as _;

/// Helpers shared by the classes below.
const HELPERS: &str = r#"
def _uniform(lo, hi):
    return lo + (hi - lo) * torch.rand(1, dtype=torch.float64).item()


def _zyx(image):
    """The image's shape and voxel size (mm) in augscope's array order [z, y, x]."""
    return np.array(image.spatial_shape[::-1], float), np.array(image.spacing[::-1], float)
"#;

/// `ArrayAxisAffine` and `RandomArrayAxisAffine`.
const AFFINE: &str = r#"
class ArrayAxisAffine(tio.Affine):
    """tio.Affine with augscope's parameters and geometry, in one resampling: `degrees` turn
    about the array axes [z, y, x] (R = Rx(a0) Ry(a1) Rz(a2), batchgenerators' matrices),
    `scales` s > 1 sample a larger region (content smaller), `translation` moves the content by
    -t (voxels; mm when space="mm"), all about the voxel centre (n - 1) / 2. The map is taken
    through the image's own affine into the SimpleITK transform that tio.Affine resamples with,
    so it does the same to the stored array whatever the orientation (RAS, LAS, LPS, oblique).
    space="mm" turns physical axes (anisotropic voxels rotate rigidly). A 2D image (W, H, 1)
    is array [1, y, x]: its angle is degrees[0]. padding="constant" pads with
    default_pad_value (TorchIO's own); "nearest" repeats the edge voxels (SimpleITK's
    nearest-neighbour extrapolator)."""

    def __init__(self, degrees=(0.0, 0.0, 0.0), scales=(1.0, 1.0, 1.0),
                 translation=(0.0, 0.0, 0.0), space="voxel", padding="constant", **kwargs):
        super().__init__(scales=scales, degrees=degrees, translation=translation, **kwargs)
        if space not in ("voxel", "mm"):
            raise ValueError(f'space must be "voxel" or "mm", not "{space}"')
        if padding not in ("constant", "nearest"):
            raise ValueError(f'padding must be "constant" or "nearest", not "{padding}"')
        self.space, self.padding = space, padding
        self.args_names = [*self.args_names, "space", "padding"]

    def get_affine_transform(self, image):
        shape, spacing = _zyx(image)
        c0, c1, c2 = np.cos(np.radians(self.degrees))
        s0, s1, s2 = np.sin(np.radians(self.degrees))
        rx = np.array([[1, 0, 0], [0, c0, -s0], [0, s0, c0]])
        ry = np.array([[c1, 0, s1], [0, 1, 0], [-s1, 0, c1]])
        rz = np.array([[c2, -s2, 0], [s2, c2, 0], [0, 0, 1]])
        m = np.diag(self.scales) @ (rx @ ry @ rz).T  # input index = m (q - ctr) + t + ctr
        t = np.asarray(self.translation, float)
        if self.space == "mm":
            m = m * spacing[None, :] / spacing[:, None]
            t = t / spacing
        ctr = (shape - 1) / 2
        index_map = np.eye(4)  # on NIfTI indices (i, j, k) = [x, y, z]
        index_map[:3, :3] = m[::-1, ::-1]
        index_map[:3, 3] = (t + ctr - m @ ctr)[::-1]
        lps = np.diag([-1.0, -1.0, 1.0, 1.0]) @ np.asarray(image.affine, float)
        world = lps @ index_map @ np.linalg.inv(lps)  # output point (LPS) -> input point
        transform = sitk.AffineTransform(3)
        transform.SetMatrix(world[:3, :3].ravel().tolist())
        transform.SetTranslation(world[:3, 3].tolist())
        return transform.GetInverse() if self.invert_transform else transform

    def apply_affine_transform(self, sitk_image, transform, interpolation, default_value):
        if self.padding == "constant":
            return super().apply_affine_transform(sitk_image, transform, interpolation,
                                                  default_value)
        resampler = sitk.ResampleImageFilter()
        resampler.SetInterpolator(self.get_sitk_interpolator(interpolation))
        resampler.SetReferenceImage(sitk_image)
        resampler.SetUseNearestNeighborExtrapolator(True)
        resampler.SetOutputPixelType(sitk.sitkFloat32)
        resampler.SetTransform(transform)
        resampled = resampler.Execute(sitk_image)
        return torch.as_tensor(sitk.GetArrayFromImage(resampled).transpose())


class RandomArrayAxisAffine(RandomTransform, tio.SpatialTransform):
    """Draws rotation, scale and translation as augscope samples the preset (each fires with its
    own probability; angles, factors and shifts uniform in their ranges, in augscope's array
    order [z, y, x], [y, x] for 2D) and applies them as one ArrayAxisAffine."""

    def __init__(self, degrees=None, p_rotate=1.0, p_rotate_axis=(1.0,), scales=None,
                 p_scale=1.0, split_scale=False, translation=None, translation_mm=False,
                 p_translate=1.0, space="voxel", padding="constant", image_interpolation="linear",
                 label_interpolation="nearest", default_pad_value=0.0, default_pad_label=0,
                 **kwargs):
        super().__init__(**kwargs)
        self.degrees, self.p_rotate, self.p_rotate_axis = degrees, p_rotate, p_rotate_axis
        self.scales, self.p_scale, self.split_scale = scales, p_scale, split_scale
        self.translation, self.translation_mm = translation, translation_mm
        self.p_translate, self.space, self.padding = p_translate, space, padding
        self.resampling = dict(image_interpolation=image_interpolation,
                               label_interpolation=label_interpolation,
                               default_pad_value=default_pad_value,
                               default_pad_label=default_pad_label)

    def _scale(self, lo, hi):
        below = torch.rand(1).item() < 0.5
        if not self.split_scale:
            return _uniform(lo, hi)
        if below and lo < 1:
            return _uniform(lo, min(1.0, hi))
        return _uniform(min(max(lo, 1.0), hi), hi)

    def get_params(self, spacing):
        degrees, scales, translation = [0.0] * 3, [1.0] * 3, [0.0] * 3
        axes = range(3 - NDIM, 3)  # the preset's axes within [z, y, x]
        if self.degrees is not None and torch.rand(1).item() < self.p_rotate:
            for a, (lo, hi) in enumerate(self.degrees):
                p_axis = self.p_rotate_axis[a % len(self.p_rotate_axis)]
                if torch.rand(1).item() < p_axis:
                    degrees[a] = _uniform(lo, hi)
        if self.scales is not None and torch.rand(1).item() < self.p_scale:
            factors = [self._scale(lo, hi) for lo, hi in self.scales]
            for i, a in enumerate(axes):
                scales[a] = factors[i % len(factors)]
        if self.translation is not None and torch.rand(1).item() < self.p_translate:
            for (lo, hi), a in zip(self.translation, axes):
                t = _uniform(lo, hi)
                if self.translation_mm and self.space == "voxel":
                    t /= spacing[a]
                elif not self.translation_mm and self.space == "mm":
                    t *= spacing[a]
                translation[a] = t
        return tuple(degrees), tuple(scales), tuple(translation)

    def apply_transform(self, subject):
        _, spacing = _zyx(subject.get_first_image())
        degrees, scales, translation = self.get_params(spacing)
        if not any(degrees) and scales == (1.0, 1.0, 1.0) and not any(translation):
            return subject  # nothing fired: no resampling
        transform = ArrayAxisAffine(degrees=degrees, scales=scales, translation=translation,
                                    space=self.space, padding=self.padding, **self.resampling,
                                    **self._get_base_args())
        return transform(subject)
"#;

/// `RandomAlphaSigmaElastic`.
const ELASTIC: &str = r#"
def _cubic_bspline(t):
    t = np.abs(t)
    return np.where(t < 1, 2 / 3 - t**2 + t**3 / 2, np.where(t < 2, (2 - t) ** 3 / 6, 0.0))


def _bspline_gain(n, mesh, locked):
    """Mean over the n voxels of one axis of sum_k B3(u - k)^2 over the control points that
    move, on SimpleITK's BSplineTransformInitializer grid (the domain [-0.5 - 1/8, n - 0.5 +
    1/8] voxels cut into `mesh` cells, one control point beyond each end)."""
    h = (n + 0.25) / mesh
    u = (np.arange(n) + 0.625) / h + 1
    k = np.arange(mesh + 3)[2:-2] if locked else np.arange(mesh + 3)
    return float((_cubic_bspline(u[:, None] - k[None, :]) ** 2).sum(1).mean())


def _gaussian_gain(n, sigma):
    """Mean over the n voxels of one axis of sum_k w(x - k)^2, w being scipy's gaussian_filter
    weights (truncate 4) and the noise zero outside the grid, as augscope smooths it."""
    r = int(4 * sigma + 0.5)
    w = np.exp(-0.5 * (np.arange(-r, r + 1) / sigma) ** 2)
    w /= w.sum()
    return float(np.convolve(np.ones(n), w**2)[r:r + n].mean())


class RandomAlphaSigmaElastic(tio.RandomElasticDeformation):
    """tio.RandomElasticDeformation driven by augscope's alpha and sigma. Each draw takes alpha
    and sigma uniformly from their ranges; the control points lie sqrt(3) sigma apart (the
    spacing at which the B-spline field's autocorrelation has the width of a gaussian-smoothed
    noise's), and max_displacement is set so that the mean squared displacement over the image
    equals augscope's alpha * G_sigma(noise) for that alpha and sigma (both computed exactly for
    the image's grid, TorchIO's locked borders included). In voxels per array axis, or mm when
    space="mm"."""

    def __init__(self, alpha, sigma, space="voxel", **kwargs):
        super().__init__(num_control_points=5, max_displacement=0, locked_borders=2, **kwargs)
        self.alpha, self.sigma, self.space = alpha, sigma, space

    def grid(self, image, alpha, sigma):
        """num_control_points and max_displacement (mm, per physical axis) for one draw."""
        shape = np.array(image.spatial_shape)  # x first, as the control grid
        spacing = np.array(image.spacing)
        moving = shape > 1 if NDIM == 2 else np.ones(3, bool)
        sigma_vox = sigma / spacing if self.space == "mm" else np.full(3, sigma)
        mesh = np.maximum(2, np.rint(shape / (math.sqrt(3) * sigma_vox))).astype(int)
        mesh[~moving] = 2
        ratio = 1.0
        for i in range(3):
            ratio *= _bspline_gain(shape[i], mesh[i], locked=i < 2)
            if moving[i]:
                ratio /= _gaussian_gain(shape[i], sigma_vox[i])
        strength = alpha / math.sqrt(ratio)
        direction = np.abs(np.asarray(image.affine, float)[:3, :3] / spacing)
        max_displacement = np.zeros(3)
        for i in np.flatnonzero(moving):
            world = int(direction[:, i].argmax())
            max_displacement[world] = strength * (spacing[i] if self.space == "voxel" else 1.0)
        return tuple(int(m) + 3 for m in mesh), tuple(float(d) for d in max_displacement)

    def apply_transform(self, subject):
        alpha, sigma = _uniform(*self.alpha), _uniform(*self.sigma)
        num_control_points, max_displacement = self.grid(subject.get_first_image(), alpha, sigma)
        control_points = self.get_params(num_control_points, max_displacement, 2)
        transform = tio.ElasticDeformation(
            control_points=control_points, max_displacement=max_displacement,
            image_interpolation=self.image_interpolation,
            label_interpolation=self.label_interpolation, **self._get_base_args())
        return transform(subject)
"#;

/// The TorchIO snippet of `p` for `ndim` spatial axes.
/// A sentence on its length: the preset's transform families map to the library's in the
/// library's own order, each beside the note that says where the library differs from augscope;
/// read top to bottom, the function is that mapping, and splitting it would scatter the table.
pub(super) fn torchio(p: &Preset, ndim: usize) -> String {
    let mut notes = intensity_left_out(p, "TorchIO", |s| s.torchio().is_some());
    let s = &p.sampling;
    let interp = match s.order {
        0 => "nearest",
        1 => "linear",
        _ => "bspline",
    };
    let affine = p.rotate.is_some() || p.scale.is_some() || p.translate.is_some();
    let padding = if s.mode == "nearest" {
        "nearest"
    } else {
        "constant"
    };
    if affine {
        notes.push(match s.mode.as_str() {
            "constant" => "TorchIO (SimpleITK's resampler) samples up to half a voxel beyond the \
                           edge voxel centres, repeating the edge there, where augscope's constant \
                           mode reads cval: the two differ only in that half-voxel shell at the \
                           border (1.27 % of the voxels of a 63 x 78 x 66 volume whose border is \
                           not background, after a turn of (15, -10, 25) degrees and scale 0.9; \
                           100.00 % within 1e-2 on the MNI sample, whose border is background). \
                           With nearest interpolation TorchIO equals augscope's grid-constant \
                           mode exactly"
                .to_string(),
            "nearest" => "mode nearest is SimpleITK's nearest-neighbour extrapolator: outside \
                          the grid it repeats the nearest edge voxel, where augscope interpolates \
                          along the edge, so they differ where the sampling leaves the grid (at \
                          least 99.98 % of voxels within 1e-2 of augscope, orders 1 and 3, after \
                          a turn of (15, -10, 25) degrees, scale 0.9 and a shift of a volume whose \
                          border is not background)"
                .to_string(),
            mode => format!(
                "TorchIO (SimpleITK's resampler) pads with a constant or the nearest edge voxel \
                 only; the preset's mode {mode:?} is not expressible: the snippet pads with cval \
                 {} instead",
                f(s.cval)
            ),
        });
    }
    let space = if p.space == Space::Mm { "mm" } else { "voxel" };
    let pad = format!(
        "padding=\"{padding}\", image_interpolation=\"{interp}\", label_interpolation=\"nearest\", \
         default_pad_value={}",
        f(s.cval)
    );
    let mut body = vec![];
    if affine {
        let mut args = vec![];
        if let Some(r) = &p.rotate {
            let n = if ndim == 3 { 3 } else { 1 };
            let g: Vec<Range> = (0..n).map(|a| rot_range(p, ndim, a)).collect();
            let pa: Vec<String> = r.p_axis.iter().map(|&q| f(q)).collect();
            args.push(format!(
                "degrees={}, p_rotate={}, p_rotate_axis=({},),",
                tuple_of_pairs(&g),
                f(r.p),
                pa.join(", ")
            ));
        }
        if let Some(sc) = &p.scale {
            let n = if sc.per_axis { ndim } else { 1 };
            let g: Vec<Range> = (0..n)
                .map(|a| axis_value(&sc.range, a).unwrap_or([1.0, 1.0]))
                .collect();
            let split = if sc.distribution == ScaleDistribution::Split {
                "True"
            } else {
                "False"
            };
            args.push(format!(
                "scales={}, p_scale={}, split_scale={split},",
                tuple_of_pairs(&g),
                f(sc.p)
            ));
        }
        if let Some(t) = &p.translate {
            let g: Vec<Range> = (0..ndim)
                .map(|a| axis_value(&t.range, a).unwrap_or([0.0, 0.0]))
                .collect();
            let mm = if t.unit == Unit::Mm { "True" } else { "False" };
            args.push(format!(
                "translation={}, translation_mm={mm}, p_translate={},",
                tuple_of_pairs(&g),
                f(t.p)
            ));
        }
        args.push(format!("space=SPACE, {pad},"));
        body.push(format!(
            "        RandomArrayAxisAffine(\n{}\n        ),",
            args.iter()
                .map(|a| format!("            {a}"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    if let Some(e) = &p.elastic {
        notes.push(format!(
            "TorchIO has no alpha/sigma elastic deformation: RandomElasticDeformation moves a \
             cubic B-spline control grid. RandomAlphaSigmaElastic draws alpha {} and sigma {} \
             ({}) and sets the grid to match: control points sqrt(3) sigma apart and \
             max_displacement so that the mean squared displacement over the image is augscope's. \
             The fields differ voxel by voxel (TorchIO draws its own control points and pads with the \
             image minimum); measured against augscope's report on the MNI sample (63 x 78 x 66 \
             voxels of 3 mm), the RMS displacement is x0.997 of augscope's (alpha 100, sigma 5 \
             voxels), x1.007 (alpha 800, sigma 9), x0.999 (alpha 300, sigma 12 mm on 6 x 2 x 2 mm \
             voxels) and x0.987 on a 78 x 66 slice (alpha 60, sigma 4); the largest displacement \
             x0.92, x1.00, x0.93 and x0.97",
            pair(e.alpha),
            pair(e.sigma),
            if p.space == Space::Mm { "mm" } else { "voxels" }
        ));
        body.push(format!(
            "        RandomAlphaSigmaElastic(alpha={}, sigma={}, space=SPACE, \
             image_interpolation=\"{interp}\", label_interpolation=\"nearest\", p={}),",
            pair(e.alpha),
            pair(e.sigma),
            f(e.p)
        ));
    }
    if let Some(fl) = &p.flip {
        for a in 0..ndim {
            let pa = axis_value(&fl.p, a).unwrap_or(0.0);
            if pa > 0.0 {
                body.push(format!(
                    "        tio.RandomFlip(axes=({},), flip_probability={}),  # augscope axis {a}",
                    ndim - 1 - a,
                    f(pa)
                ));
            }
        }
    }
    // The TorchIO intensity families, after the resample (TorchIO applies them to scalar images
    // only).
    for c in p.intensity.iter().filter_map(|s| s.torchio()) {
        body.push(format!("        {},", c.python("tio.", "")));
    }
    // The normalisation first, as training's pipeline runs it.
    if let Some(c) = p.normalize.as_ref().and_then(|n| n.torchio()) {
        body.insert(0, format!("        {},", c.python("tio.", "")));
    }
    let mut out = header(p, Target::TorchIo, "TorchIO", ndim);
    out.push_str(
        "# Ranges and axes are augscope's: array axes [z, y, x] (NIfTI k, j, i; TorchIO's tensor\n\
         # holds them x first as (W, H, D), so flips use axis ndim-1-a), angles in degrees. The\n\
         # classes below are small subclasses of TorchIO's own transforms: they turn, scale and\n\
         # translate the stored array about its voxel centre (n - 1) / 2 as augscope does, through\n\
         # each image's affine, so RAS, LAS, LPS and oblique scans get the same array-axis transform.\n",
    );
    if ndim == 2 {
        out.push_str(
            "# A 2D image is TorchIO's one-slice volume (W, H, 1); it turns in its plane.\n",
        );
    }
    if p.space == Space::Mm {
        out.push_str(
            "# space = \"mm\": rotation turns physical axes (voxel size from each image's affine), so\n\
             # anisotropic voxels rotate without shearing; elastic alpha and sigma are mm, and\n\
             # translations follow the preset's unit.\n",
        );
    }
    out.push_str(&notes_block(&notes));
    out.push('\n');
    if p.elastic.is_some() {
        out.push_str("import math\n\n");
    }
    out.push_str("import numpy as np\n");
    if affine {
        out.push_str("import SimpleITK as sitk\n");
    }
    out.push_str("import torch\nimport torchio as tio\n");
    if affine {
        out.push_str("from torchio.transforms.augmentation import RandomTransform\n");
    }
    let _ = write!(
        out,
        "\nSPACE = \"{space}\"  # where rotation, translation and elastic act: \"voxel\" or \"mm\"\n\
         NDIM = {ndim}  # 3, or 2 for 2D images (TorchIO's (W, H, 1))\n\n"
    );
    if affine || p.elastic.is_some() {
        out.push_str(HELPERS);
    }
    if affine {
        out.push('\n');
        out.push_str(AFFINE);
    }
    if p.elastic.is_some() {
        out.push('\n');
        out.push_str(ELASTIC);
    }
    let _ = write!(
        out,
        "\n\ndef get_transforms():\n    return tio.Compose([\n{}\n    ])\n",
        body.join("\n")
    );
    out
}
