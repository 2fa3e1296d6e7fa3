"""Builds assets/mni152_tissue_labels.nii.gz from the MNI152 grey/white-matter probability maps.

Label 1 = grey matter, 2 = white matter, 0 = background: a voxel takes the tissue with the larger
probability where that probability exceeds 0.5, and only inside the bundled T1 (the T1 is
skull-stripped: where it is 0 there is no tissue, and a label there would draw a rim around the
brain). Run from the repository root:
    python3 scripts/make_sample_labels.py ../shared/data
(the project's shared data folder; that is also the default).
"""
import sys

import nibabel as nib
import numpy as np

src = sys.argv[1] if len(sys.argv) > 1 else "../shared/data"
gm = nib.load(f"{src}/mni152_gm_prob.nii.gz")
wm = nib.load(f"{src}/mni152_wm_prob.nii.gz")
g = np.asarray(gm.dataobj, dtype=np.float32)
w = np.asarray(wm.dataobj, dtype=np.float32)
lab = np.zeros(g.shape, np.uint8)
lab[(g > 0.5) & (g >= w)] = 1
lab[(w > 0.5) & (w > g)] = 2
t1 = np.asarray(nib.load("assets/mni152_t1.nii.gz").dataobj)
assert t1.shape == lab.shape, (t1.shape, lab.shape)
lab[t1 == 0] = 0
hdr = gm.header.copy()
hdr.set_data_dtype(np.uint8)
hdr["scl_slope"] = 1
hdr["scl_inter"] = 0
img = nib.Nifti1Image(lab, gm.affine, hdr)
nib.save(img, "assets/mni152_tissue_labels.nii.gz")
print(lab.shape, np.bincount(lab.ravel()))
