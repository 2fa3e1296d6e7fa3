//! Presets (ranges and probabilities), their sampling into plans, and the done list: what a
//! sampled plan did, in the words a report and the explorer use.

pub mod preset;

use serde::{Deserialize, Serialize};

pub use crate::core::mode::Mode;
pub use crate::core::plan::{CoordMap, Elastic, Order, Plan, PlanError, Space, limits};

/// One transform that fired, with its values (the "done list").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Done {
    pub transform: String,
    pub values: serde_json::Value,
}

/// The done list of a plan.
pub trait DoneList {
    /// The transforms that fire, in the order they act (docs/design.md §3), with their values.
    fn done_list(&self) -> Vec<Done>;
}

impl DoneList for Plan {
    fn done_list(&self) -> Vec<Done> {
        let mut done = vec![];
        let flip = Done {
            transform: "flip".into(),
            values: serde_json::json!({ "axes": self.flip }),
        };
        let flip_last = self.flip_around_steps().is_some();
        if !self.flip.is_empty() && !flip_last {
            done.push(flip.clone());
        }
        // In mm space every spatial entry says so, with the values in voxels beside it; voxel
        // space (the default) keeps its entries as they always were.
        let mm = self.space == Space::Mm;
        if let Some(e) = &self.elastic
            && e.alpha != 0.0
        {
            let mut values =
                serde_json::json!({ "alpha": e.alpha, "sigma": e.sigma, "seed": e.seed });
            if mm {
                values["space"] = "mm".into();
                values["sigma_vox"] = self.field_sigma_vox(self.spacing_mm.len()).into();
            }
            done.push(Done {
                transform: "elastic".into(),
                values,
            });
        }
        if self.rotate_rad.iter().any(|&a| a != 0.0) {
            let deg: Vec<f64> = self.rotate_rad.iter().map(|a| a.to_degrees()).collect();
            let mut values =
                serde_json::json!({ "angles_rad": self.rotate_rad, "angles_deg": deg });
            if mm {
                values["space"] = "mm".into();
                values["spacing_mm"] = self.spacing_mm.clone().into();
            }
            done.push(Done {
                transform: "rotate".into(),
                values,
            });
        }
        if self.scale.iter().any(|&s| s != 1.0) {
            done.push(Done {
                transform: "scale".into(),
                values: serde_json::json!({ "scale": self.scale }),
            });
        }
        if self.translate.iter().any(|&t| t != 0.0) {
            let values = if mm {
                let vox: Vec<f64> = self
                    .translate
                    .iter()
                    .zip(&self.spacing_mm)
                    .map(|(t, s)| t / s)
                    .collect();
                serde_json::json!({ "mm": self.translate, "voxels": vox, "space": "mm" })
            } else {
                serde_json::json!({ "voxels": self.translate })
            };
            done.push(Done {
                transform: "translate".into(),
                values,
            });
        }
        // The intensity steps, after the resample, in their order, with their values per
        // channel (`null`: a channel left out).
        for step in &self.intensity {
            let values = match serde_json::to_value(step) {
                Ok(serde_json::Value::Object(m)) => m.into_iter().next().map(|(_, v)| v),
                _ => None,
            };
            done.push(Done {
                transform: step.name().into(),
                values: values.unwrap_or(serde_json::Value::Null),
            });
        }
        if flip_last {
            done.push(Done {
                values: serde_json::json!({ "axes": self.flip, "after_intensity": true }),
                ..flip
            });
        }
        done
    }
}
