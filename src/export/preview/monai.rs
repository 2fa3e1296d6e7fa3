//! MONAI 1.6's model: one lazy resample for translation, scale and rotation, then
//! `Rand3DElasticd`'s second resample through uniform noise smoothed by `GaussianFilter`'s erf
//! kernel, padding with 0.

use super::{
    Model, Preview, PreviewError, affine_only, flip_only, has_affine, live_elastic, map_with_alpha,
    unit_field, voxel_plan,
};
use crate::augment::Plan;
use crate::core::volume::Volume;
use crate::engine::boundary::Mode;
use crate::engine::cpu::resample_map;
use crate::engine::noise::fill_noise;

/// MONAI's `gaussian_1d(sigma, truncated=3.0, approx="erf")` (not normalised): tail
/// `int(max(3 sigma, 0.5) + 0.5)`, weights `(erf((x + 0.5) t) - erf((x - 0.5) t)) / 2` with
/// `t = 0.70710678 / sigma`.
pub fn monai_erf_kernel(sigma: f64) -> Vec<f64> {
    let tail = ((sigma * 3.0).max(0.5) + 0.5) as i64;
    // MONAI's own literal (not 1/sqrt(2) to f64 precision).
    #[allow(clippy::approx_constant)]
    let t = 0.707_106_78 / sigma.abs();
    (-tail..=tail)
        .map(|x| {
            let x = x as f64;
            (0.5 * (libm::erf(t * (x + 0.5)) - libm::erf(t * (x - 0.5)))).max(0.0)
        })
        .collect()
}

/// `Rand3DElasticd`'s smoothed offset: augscope's uniform noise of component `k`, separably
/// correlated with [`monai_erf_kernel`] on every axis, zero outside the grid.
fn monai_field(shape: &[usize], sigma: f64, seed: u64) -> Vec<Vec<f32>> {
    let n: usize = shape.iter().product();
    let w = monai_erf_kernel(sigma);
    (0..shape.len())
        .map(|k| {
            let mut c = vec![0f32; n];
            fill_noise(seed, k as u32, 0, &mut c);
            let mut tmp = vec![0f32; n];
            for axis in 0..shape.len() {
                crate::engine::gaussian::correlate_axis_zero(&c, &mut tmp, shape, axis, &w);
                std::mem::swap(&mut c, &mut tmp);
            }
            c
        })
        .collect()
}

pub(super) fn monai(
    image: &Volume,
    label: Option<&Volume>,
    plan: &Plan,
) -> Result<Preview, PreviewError> {
    let mut steps = vec![];
    let mut p = voxel_plan(plan, image, "MONAI", &mut steps);
    let ndim = image.ndim();
    if p.cval != 0.0 {
        steps.push(format!("MONAI pads with 0, not the plan's cval {}", p.cval));
        p.cval = 0.0;
    }
    let mut elastic = live_elastic(&p);
    if elastic.is_some() && ndim == 2 {
        steps.push(
            "MONAI has no 2D elastic deformation of smoothed noise: the elastic part is left out"
                .into(),
        );
        elastic = None;
        p.elastic = None;
    }
    let sampling = (p.order, p.mode, p.cval);
    let Some(e) = elastic else {
        let map = p.compose(&image.shape)?;
        let (img, lab) = resample_map(image, label, &map, None, sampling, Mode::Constant);
        return Ok(Preview {
            image: img,
            label: lab,
            model: Model::Monai,
            steps,
            control_grid: None,
            displacement: None,
        });
    };
    // The field lives on the output grid, where the elastic resample runs.
    let grid = p.out_shape.clone().unwrap_or_else(|| image.shape.clone());
    let field = unit_field(&grid, e.sigma, e.seed, monai_field(&grid, e.sigma, e.seed));
    let displacement = Some(field.displacement_stats(e.alpha));
    steps.push(format!(
        "elastic: MONAI's GaussianFilter (erf kernel truncated at 3 sigma, {} taps, not \
         normalised) smooths the noise",
        monai_erf_kernel(e.sigma).len()
    ));
    let (img, lab) = if has_affine(&p) {
        steps.push(
            "two resamples: translation, scale and rotation first (one lazy resample), then the \
             elastic deformation (Rand3DElasticd is not lazy) and the flip"
                .into(),
        );
        let first = affine_only(&p).compose(&image.shape)?;
        let (mid, mid_lab) = resample_map(image, label, &first, None, sampling, Mode::Constant);
        let mut second = flip_only(&p);
        second.elastic = Some(e);
        let map = map_with_alpha(&second, &mid.shape, e.alpha)?;
        resample_map(
            &mid,
            mid_lab.as_ref(),
            &map,
            Some(&field),
            sampling,
            Mode::Constant,
        )
    } else {
        let map = map_with_alpha(&p, &image.shape, e.alpha)?;
        resample_map(image, label, &map, Some(&field), sampling, Mode::Constant)
    };
    Ok(Preview {
        image: img,
        label: lab,
        model: Model::Monai,
        steps,
        control_grid: None,
        displacement,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_kernel_is_monais() {
        // monai.networks.layers.convutils.gaussian_1d(2.0, truncated=3.0): 13 taps, centre
        // 0.19741265, sum 0.99884593 (not normalised).
        let k = monai_erf_kernel(2.0);
        assert_eq!(k.len(), 13);
        assert!((k[6] - 0.197_412_7).abs() < 1e-6, "{}", k[6]);
        let s: f64 = k.iter().sum();
        assert!((s - 0.998_845_93).abs() < 1e-6, "{s}");
    }
}
