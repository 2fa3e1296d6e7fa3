//! What the integration tests share: deterministic test volumes (`volumes`), running the
//! `augscope` binary (`cli`), paths and loaders of the stored fixtures (`fixtures`, with the case
//! schemas of the scipy resampling fixtures in `scipy_cases` and of the filter fixtures in
//! `filter_cases`), the CPU and CUDA engines (`backends`), and, with the `gui` feature, stepping
//! the explorer (`gui`). Each test binary compiles this module on its own and uses part of it.
#![allow(dead_code)]

pub mod backends;
pub mod cli;
pub mod filter_cases;
pub mod fixtures;
pub mod scipy_cases;
pub mod volumes;

#[cfg(feature = "gui")]
pub mod gui;
