//! The pure core: the data every other layer speaks in. A [`Volume`] and its grid, the boundary
//! [`Mode`]s, a [`Plan`] composed into a [`CoordMap`], the [`FieldSpec`] of an elastic field, the
//! 1D gaussian kernel, and what a caller asks of the engines ([`Precision`], [`BackendSpec`]).
//!
//! This folder imports nothing else of the crate.

pub mod draws;
pub mod field;
pub mod gaussian;
pub mod intensity;
pub mod labels;
pub mod mode;
pub mod philox;
pub mod plan;
pub mod spec;
pub mod volume;

pub use field::FieldSpec;
pub use intensity::{GammaValue, IntensitySpec, IntensityStep};
pub use labels::LabelValues;
pub use mode::Mode;
pub use plan::{CoordMap, Elastic, Order, Plan, PlanError, Space};
pub use spec::{BackendSpec, Precision};
pub use volume::{DType, Volume};
