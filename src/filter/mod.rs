//! Filters on `[z, y, x]` (or `[y, x]`) arrays. Separable gaussian smoothing is shared with the
//! elastic field of the spatial transform.

pub mod gaussian;
