//! Point-wise intensity filters: gamma and contrast/brightness. Any array shape; channels and
//! batch items are just more values.

use rayon::prelude::*;

/// Gamma correction `scale * (max(x, 0) / scale)^gamma`, in f32 as medical-image-std's
/// `Filters.gamma_correction` (`(x / 4095) ** gamma * 4095`, `scale = 4095`). Negative inputs
/// count as 0 (a power of a negative number has no real value).
pub fn gamma(data: &mut [f32], gamma: f32, scale: f32) {
    data.par_iter_mut()
        .for_each(|v| *v = (v.max(0.0) / scale).powf(gamma) * scale);
}

/// Contrast and brightness `contrast * x + brightness` (a linear window, as
/// `torchvision.transforms.functional` and OpenCV's `convertTo(alpha, beta)` apply it).
pub fn contrast(data: &mut [f32], contrast: f32, brightness: f32) {
    data.par_iter_mut()
        .for_each(|v| *v = contrast * *v + brightness);
}
