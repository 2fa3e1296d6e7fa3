//! augscope: exact (scipy-compatible) spatial augmentation of medical images on CPU and CUDA.
//!
//! Layers look down only: `volume`, `io`, `augment`, `engine`, `filter` and `export` never know
//! about the GUI (`app`, behind the `gui` feature); `cli`, the command line, sits on top of them
//! all (the `augscope` binary is its `main`).

pub mod augment;
pub mod bench;
pub mod cli;
pub mod core;
pub mod engine;
pub mod export;
pub mod filter;
pub mod gpu;
pub mod io;

#[cfg(feature = "gui")]
pub mod app;

pub use crate::core::{DType, Elastic, Mode, Order, Plan, Volume};
