//! The bundled label map marks tissue only inside the bundled T1: the T1 is skull-stripped, and
//! a label where it is 0 draws a rim around the brain in the explorer.

use augscope::io;

#[test]
fn no_labelled_voxel_of_the_sample_lies_where_the_t1_is_zero() {
    let root = env!("CARGO_MANIFEST_DIR");
    let t1 = io::load(
        format!("{root}/assets/mni152_t1.nii.gz").as_ref(),
        &Default::default(),
    )
    .expect("the T1");
    let labels = io::load(
        format!("{root}/assets/mni152_tissue_labels.nii.gz").as_ref(),
        &Default::default(),
    )
    .expect("the label map");
    assert_eq!(t1.shape, labels.shape);
    let labelled = labels.data.iter().filter(|&&l| l != 0.0).count();
    let outside = t1
        .data
        .iter()
        .zip(&labels.data)
        .filter(|&(&t, &l)| l != 0.0 && t == 0.0)
        .count();
    assert!(labelled > 1_000_000, "{labelled} labelled voxels");
    assert_eq!(
        outside, 0,
        "{outside} of {labelled} labelled voxels have T1 = 0"
    );
    // Both tissues are there.
    for l in [1.0, 2.0] {
        assert!(labels.data.contains(&l), "label {l}");
    }
}
