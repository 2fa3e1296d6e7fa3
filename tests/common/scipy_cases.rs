//! The schema of the scipy resampling fixtures (`tests/fixtures/cases.json` from
//! `gen_fixtures.py`, `tests/fixtures/space/cases.json` from `gen_space_fixtures.py`), the plan
//! each case describes, and the loaders of a fixture folder. Arrays are `[z, y, x]` (2D
//! `[y, x]`), channels leading.

use std::path::PathBuf;

use augscope::augment::Space;
use augscope::io::npy;
use augscope::{Elastic, Mode, Order, Plan, Volume};
use serde::Deserialize;

#[derive(Deserialize)]
pub struct Fixtures {
    pub scipy: String,
    pub tolerance: f64,
    pub min_pass_fraction: f64,
    pub cases: Vec<Case>,
}

#[derive(Deserialize)]
pub struct Case {
    pub family: String,
    pub name: String,
    pub input: String,
    #[serde(default = "one")]
    pub channels: usize,
    pub plan: CasePlan,
    pub expected: String,
    pub mask: Option<String>,
    pub label: Option<String>,
    pub expected_label: Option<String>,
    pub label_mask: Option<String>,
    pub field: Option<String>,
}

fn one() -> usize {
    1
}

/// The plan as the generator writes it; built into a [`Plan`] field by field, so that the tests
/// do not depend on `Plan`'s own serde format.
#[derive(Deserialize)]
pub struct CasePlan {
    pub flip: Vec<usize>,
    pub rotate_rad: Vec<f64>,
    pub scale: Vec<f64>,
    pub translate: Vec<f64>,
    pub elastic: Option<CaseElastic>,
    pub order: u32,
    pub mode: String,
    pub cval: f32,
    pub out_shape: Option<Vec<usize>>,
    /// `voxel` (the default) or `mm`.
    #[serde(default)]
    pub space: Option<String>,
    #[serde(default)]
    pub spacing_mm: Vec<f64>,
}

#[derive(Deserialize)]
pub struct CaseElastic {
    pub alpha: f64,
    pub sigma: f64,
    pub seed: u64,
}

impl CasePlan {
    pub fn to_plan(&self) -> Plan {
        Plan {
            flip: self.flip.clone(),
            rotate_rad: self.rotate_rad.clone(),
            scale: self.scale.clone(),
            translate: self.translate.clone(),
            elastic: self.elastic.as_ref().map(|e| Elastic {
                alpha: e.alpha,
                sigma: e.sigma,
                seed: e.seed,
            }),
            order: Order::try_from(self.order).expect("fixture order is 0, 1 or 3"),
            mode: self
                .mode
                .parse::<Mode>()
                .expect("fixture mode is a scipy mode"),
            cval: self.cval,
            out_shape: self.out_shape.clone(),
            space: self
                .space
                .as_deref()
                .map_or(Space::Voxel, |s| s.parse::<Space>().expect("voxel or mm")),
            spacing_mm: self.spacing_mm.clone(),
            intensity: vec![],
            flip_after_intensity: false,
        }
    }
}

/// A fixture folder under `tests/`, e.g. `fixtures` or `fixtures/space`.
pub struct FixtureDir(pub PathBuf);

impl FixtureDir {
    pub fn new(rel: &str) -> Self {
        FixtureDir(super::fixtures::tests_dir(rel))
    }

    pub fn fixtures(&self) -> Fixtures {
        let path = self.0.join("cases.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        serde_json::from_str(&text).expect("cases.json matches the generator's schema")
    }

    pub fn load(&self, name: &str) -> npy::NpyArray {
        npy::read(&self.0.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// A channels-first input as a volume.
    pub fn volume(&self, name: &str, channels: usize) -> Volume {
        let a = self.load(name);
        let shape = if channels > 1 {
            a.shape[1..].to_vec()
        } else {
            a.shape.clone()
        };
        Volume::new(a.data, shape, channels)
    }
}
