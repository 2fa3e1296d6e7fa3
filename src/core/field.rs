//! The identity of a unit elastic field.

/// The one identity of the smoothed unit elastic field `G_sigma(noise_k)` (docs/design.md §4): the field
/// depends on these three and nothing else (alpha only scales it), so every cache of fields is
/// keyed by one of these.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldSpec {
    /// Seed of the Philox noise.
    pub seed: u64,
    /// The gaussian's sigma per axis, in voxels, `[z, y, x]`.
    pub sigma_vox: Vec<f64>,
    /// The output grid.
    pub shape: Vec<usize>,
}
