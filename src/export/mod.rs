//! Getting augmentations out of augscope: batches of augmented volumes on disk with a manifest
//! ([`batch`]), presets translated into training-pipeline code ([`interop`]) and parameter dicts
//! of batchgenerators / nnU-Net read back into presets ([`import`]).
//!
//! Vectors are in array-axis order `[z, y, x]`, as everywhere in augscope; the snippets say where
//! a target indexes x first.

pub mod batch;
pub mod import;
pub mod interop;
pub mod preview;

pub use interop::{Target, export};
