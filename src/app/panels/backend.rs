//! The Engine section of the controls (backend and precision) and the information panel's GPU
//! memory: what each CUDA device has free and what augscope holds on it.

use eframe::egui::{self, RichText};

use crate::app::Runtime;
use crate::app::state::{BackendChoice, Params};
use crate::engine::Precision;

pub(super) fn engine_ui(ui: &mut egui::Ui, p: &mut Params, rt: &Runtime) {
    let n_dev = rt.gpu.devices.as_ref().map_or(0, |d| d.devices.len());
    ui.horizontal(|ui| {
        let lb = ui.label("backend");
        egui::ComboBox::from_id_salt("backend")
            .selected_text(p.backend.label())
            .show_ui(ui, |ui| {
                ui.selectable_value(&mut p.backend, BackendChoice::Auto, "auto");
                ui.selectable_value(&mut p.backend, BackendChoice::Cpu, "CPU");
                for i in 0..n_dev.max(1) {
                    ui.selectable_value(
                        &mut p.backend,
                        BackendChoice::Cuda(i),
                        format!("CUDA {i}"),
                    );
                }
            })
            .response
            .labelled_by(lb.id);
        let lp = ui.label("precision");
        egui::ComboBox::from_id_salt("precision")
            .selected_text(format!("{:?}", p.precision).to_lowercase())
            .show_ui(ui, |ui| {
                for pr in [Precision::F32, Precision::F16, Precision::Bf16] {
                    ui.selectable_value(&mut p.precision, pr, format!("{pr:?}").to_lowercase());
                }
            })
            .response
            .labelled_by(lp.id);
    });
    if n_dev == 0
        && let Some(why) = rt.gpu.devices.as_ref().and_then(|d| d.unavailable_reason())
    {
        ui.weak(format!("no CUDA: {why}"));
    }
}

fn mib(b: usize) -> String {
    format!("{:.0} MiB", b as f64 / (1024.0 * 1024.0))
}

pub(super) fn gpu_memory_ui(ui: &mut egui::Ui, rt: &Runtime) {
    let Some(d) = &rt.gpu.devices else {
        ui.spinner();
        return;
    };
    if d.devices.is_empty() {
        ui.label(
            d.unavailable_reason()
                .unwrap_or_else(|| "no CUDA device".into()),
        );
        ui.weak("the CPU engine computes everything");
        return;
    }
    for dev in &d.devices {
        let live = rt.gpu.memory.iter().find(|m| m.ordinal == dev.ordinal);
        let (free, total) = live.map_or((dev.free_bytes, dev.total_bytes), |m| {
            (m.driver_free_bytes, m.driver_total_bytes)
        });
        ui.label(RichText::new(format!("cuda:{} {}", dev.ordinal, dev.name)).strong());
        let used = total.saturating_sub(free);
        ui.add(
            egui::ProgressBar::new(if total > 0 {
                used as f32 / total as f32
            } else {
                0.0
            })
            .text(format!("driver: {} free of {}", mib(free), mib(total))),
        );
        if let Some(m) = live {
            ui.label(format!(
                "augscope: {} reserved, {} in use, peak {}",
                mib(m.reserved_bytes),
                mib(m.allocated_bytes),
                mib(m.peak_bytes)
            ));
        }
    }
}
