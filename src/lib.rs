//! augscope: exact (scipy-compatible) spatial augmentation of medical images on CPU and CUDA.
//!
//! Layers look down only: `volume`, `io`, `augment`, `engine`, `filter` and `export` never know
//! about the GUI (`app`, behind the `gui` feature); `cli`, the command line, sits on top of them
//! all (the `augscope` binary is its `main`).

pub mod augment;
pub mod bench;
pub mod cli;
pub mod engine;
pub mod export;
pub mod filter;
pub mod io;
pub mod volume;

#[cfg(feature = "gui")]
pub mod app;

pub use augment::{Elastic, Mode, Order, Plan};
pub use volume::{DType, Volume};
