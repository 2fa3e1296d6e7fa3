//! The nnU-Net v2 trainer subclass (batchgeneratorsv2 `SpatialTransform`).

use std::fmt::Write as _;

use super::*;

pub(super) fn nnunet(p: &Preset, ndim: usize) -> String {
    let _ = ndim;
    let mut notes: Vec<String> = voxel_target_note(p, "nnU-Net (batchgeneratorsv2)")
        .into_iter()
        .collect();
    let rot3 = rad(rot_range(p, 3, 0));
    let rot2 = rad(rot_range(p, 2, 0));
    if let Some(r) = &p.rotate {
        if r.range_deg.len() > 1 && !r.range_deg.windows(2).all(|w| w[0] == w[1]) {
            notes.push(
                "nnU-Net draws every axis's angle from one range; the range of axis 0 is used"
                    .into(),
            );
        }
        if r.p_axis.len() > 1 && !all_equal(&r.p_axis) {
            notes.push("nnU-Net has one p_rot_per_axis; the one of axis 0 is used".into());
        }
    }
    let (p_rot, p_rot_axis) = p.rotate.as_ref().map_or((0.0, 1.0), |r| {
        (r.p, r.p_axis.first().copied().unwrap_or(1.0))
    });
    let (p_scale, scale, sync) = match &p.scale {
        Some(sc) => {
            let g = sc.range.first().copied().unwrap_or([1.0, 1.0]);
            if sc.range.len() > 1 {
                notes.push(
                    "nnU-Net draws every axis's scale from one range; the range of axis 0 is used"
                        .into(),
                );
            }
            if sc.distribution == ScaleDistribution::Split {
                notes.push(
                    "nnU-Net v2 draws scales uniformly; the preset draws below and above 1 with \
                     equal chance"
                        .into(),
                );
            }
            (sc.p, g, if sc.per_axis { 0.0 } else { 1.0 })
        }
        None => (0.0, [1.0, 1.0], 1.0),
    };
    let (p_el, el_scale, el_mag) = match &p.elastic {
        Some(e) => {
            let mag = [
                3.0 * elastic_rms_vox(e.alpha[0], e.sigma[1], 3),
                3.0 * elastic_rms_vox(e.alpha[1], e.sigma[0], 3),
            ];
            notes.push(format!(
                "batchgeneratorsv2 scales its elastic field to a maximum displacement (pixels) and \
                 gives sigma as a fraction of the patch size; alpha {} / sigma {} voxels become \
                 magnitude {} (3x the RMS displacement) and sigma / max(patch_size)",
                pair(e.alpha),
                pair(e.sigma),
                pair(mag)
            ));
            (e.p, e.sigma, mag)
        }
        None => (0.0, [1.0, 1.0], [0.0, 0.0]),
    };
    if p.translate.is_some() {
        notes.push("nnU-Net's SpatialTransform has no translation; it is left out".into());
    }
    let s = &p.sampling;
    if s.order != 1 || s.mode != "constant" {
        notes.push(format!(
            "batchgeneratorsv2 resamples with torch grid_sample: bilinear with zero padding; the \
             preset's order {} and mode {:?} are not expressible",
            s.order, s.mode
        ));
    }
    let mirror: Vec<usize> = match &p.flip {
        Some(fl) => (0..3)
            .filter(|&a| axis_value(&fl.p, a).unwrap_or(0.0) > 0.0)
            .collect(),
        None => vec![],
    };
    if let Some(fl) = &p.flip
        && fl.p.iter().any(|&q| q > 0.0 && q != 0.5)
    {
        notes.push("nnU-Net mirrors each allowed axis with p 0.5".into());
    }
    let mirror3 = format!(
        "({})",
        mirror
            .iter()
            .map(|a| format!("{a},"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mirror2 = format!(
        "({})",
        mirror
            .iter()
            .filter(|&&a| a < 2)
            .map(|a| format!("{a},"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut out = header(
        p,
        Target::Nnunet,
        "nnU-Net v2 (trainer subclass, nnunetv2 >= 2.5)",
        3,
    );
    out.push_str(
        "# Put this file in nnunetv2/training/nnUNetTrainer/ and train with -tr nnUNetTrainerAugscope.\n\
         # nnU-Net indexes array axes as augscope does; angles in radians; scaling > 1 samples a\n\
         # larger region (content smaller), as augscope.\n",
    );
    out.push_str(&notes_block(&notes));
    let _ = write!(
        out,
        r#"import numpy as np

from batchgeneratorsv2.transforms.spatial.spatial import SpatialTransform
from nnunetv2.training.data_augmentation.compute_initial_patch_size import get_patch_size
from nnunetv2.training.nnUNetTrainer.nnUNetTrainer import nnUNetTrainer

ROTATION_3D = {rot3}
ROTATION_2D = {rot2}
P_ROTATION = {p_rot}
P_ROT_PER_AXIS = {p_rot_axis}
SCALING = {scale}
P_SCALING = {p_scale}
P_SYNCHRONIZE_SCALING = {sync}
P_ELASTIC = {p_el}
ELASTIC_SIGMA_VOX = {el_scale}
ELASTIC_MAGNITUDE_VOX = {el_mag}
MIRROR_AXES_3D = {mirror3}
MIRROR_AXES_2D = {mirror2}


class nnUNetTrainerAugscope(nnUNetTrainer):
    def configure_rotation_dummyDA_mirroring_and_inital_patch_size(self):
        rotation, dummy_2d, _, _ = super().configure_rotation_dummyDA_mirroring_and_inital_patch_size()
        patch_size = self.configuration_manager.patch_size
        dim = len(patch_size)
        if dim == 2 or dummy_2d:
            rotation = ROTATION_2D
        else:
            rotation = ROTATION_3D
        mirror_axes = MIRROR_AXES_2D if dim == 2 else MIRROR_AXES_3D
        if dummy_2d:
            initial = get_patch_size(patch_size[1:], rotation, (0, 0), (0, 0), SCALING)
            initial = np.array([patch_size[0]] + list(initial)).astype(int)
        elif dim == 2:
            initial = get_patch_size(patch_size, rotation, (0, 0), (0, 0), SCALING)
        else:
            initial = get_patch_size(patch_size, rotation, rotation, rotation, SCALING)
        self.inference_allowed_mirroring_axes = mirror_axes
        return rotation, dummy_2d, tuple(int(i) for i in initial), mirror_axes

    @staticmethod
    def get_training_transforms(patch_size, rotation_for_DA, deep_supervision_scales, mirror_axes,
                                do_dummy_2d_data_aug, *args, **kwargs):
        transforms = nnUNetTrainer.get_training_transforms(
            patch_size, rotation_for_DA, deep_supervision_scales, mirror_axes,
            do_dummy_2d_data_aug, *args, **kwargs)
        for t in transforms.transforms:
            if isinstance(t, SpatialTransform):
                t.p_rotation = P_ROTATION
                t.p_rot_per_axis = P_ROT_PER_AXIS
                t.p_scaling = P_SCALING
                t.scaling = SCALING
                t.p_synchronize_scaling_across_axes = P_SYNCHRONIZE_SCALING
                t.p_elastic_deform = P_ELASTIC
                edge = float(max(patch_size))
                t.elastic_deform_scale = tuple(s / edge for s in ELASTIC_SIGMA_VOX)
                t.elastic_deform_magnitude = ELASTIC_MAGNITUDE_VOX
        return transforms
"#,
        rot3 = pair(rot3),
        rot2 = pair(rot2),
        p_rot = f(p_rot),
        p_rot_axis = f(p_rot_axis),
        scale = pair(scale),
        p_scale = f(p_scale),
        sync = f(sync),
        p_el = f(p_el),
        el_scale = pair(el_scale),
        el_mag = pair(el_mag),
    );
    out
}
