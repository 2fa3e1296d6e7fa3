//! augscope: exact (scipy-compatible) spatial augmentation of medical images on CPU and CUDA.
//!
//! Layers look down only (docs/ARCHITECTURE.md): `core`; `io`, `augment`, `gpu`; `engine`;
//! `filter`; `export`; `app` (the GUI, behind the `gui` feature); `bench`; `cli`, the command
//! line (the `augscope` binary is its `main`). Nothing below `app` knows about the GUI.

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
