"""nnU-Net v2 training throughput: nnUNetTrainer (augmentation in CPU workers) against
augscope's nnUNetTrainerAugscopeGPU (the augmentation on the training GPU, one engine call per
batch), on a small dataset made from the bundled MNI152 brain and its tissue labels.

Each result line: the median and mean ms per iteration (after the first quarter, at most 10,
untimed), the mean wait for the data loader, the mean time in train_step (augscope's GPU
augmentation included for its trainer), and gpu_busy_frac, the share of the iteration spent in
train_step (the GPU idles while the loop waits for data).

  python bench.py prepare WORK T1 LABELS [N_CASES]
  python bench.py train WORK VARIANT ITERS        (prints one JSON line)
  python bench.py converge WORK VARIANT SEED EPOCHS ITERS VAL_ITERS   (one JSON line: the
      validation pseudo-Dice of every epoch, nnU-Net's own metric, from a short real training)

VARIANT: default | augscope | augscope-workers | default-elastic | augscope-elastic | noda (no
augmentation: the floor). augscope keeps the training cases on the GPU when they fit;
augscope-workers leaves them in nnU-Net's data-loader workers. nnUNet_n_proc_DA sets the
CPU workers. torch.compile is off for all variants (nnUNet_compile=f), so they compare alike.
"""
import json, os, sys, time

def env(work):
    os.environ.setdefault("nnUNet_raw", f"{work}/raw")
    os.environ.setdefault("nnUNet_preprocessed", f"{work}/pre")
    os.environ.setdefault("nnUNet_results", f"{work}/res")
    os.environ.setdefault("nnUNet_compile", "f")

DS = 900
NAME = f"Dataset{DS:03d}_MNI"

def prepare(work, t1, labels, n=8):
    env(work)
    import numpy as np, nibabel as nib
    raw = f"{work}/raw/{NAME}"
    os.makedirs(f"{raw}/imagesTr", exist_ok=True); os.makedirs(f"{raw}/labelsTr", exist_ok=True)
    img = nib.load(t1); lab = nib.load(labels)
    a = np.asarray(img.dataobj, dtype=np.float32); l = np.asarray(lab.dataobj).astype(np.uint8)
    rng = np.random.default_rng(0)
    for i in range(n):
        s = [int(x) for x in rng.integers(-6, 7, size=3)]
        ai = np.roll(a, s, axis=(0, 1, 2)) * float(rng.uniform(0.8, 1.2)) + float(rng.normal(0, 5))
        li = np.roll(l, s, axis=(0, 1, 2))
        nib.save(nib.Nifti1Image(ai.astype(np.float32), img.affine), f"{raw}/imagesTr/mni_{i:03d}_0000.nii.gz")
        nib.save(nib.Nifti1Image(li, img.affine), f"{raw}/labelsTr/mni_{i:03d}.nii.gz")
    nl = int(l.max())
    json.dump({"channel_names": {"0": "T1"},
               "labels": {"background": 0, **{f"tissue{k}": k for k in range(1, nl + 1)}},
               "numTraining": n, "file_ending": ".nii.gz",
               "overwrite_image_reader_writer": "NibabelIO"}, open(f"{raw}/dataset.json", "w"))
    from nnunetv2.experiment_planning.plan_and_preprocess_api import (
        extract_fingerprints, plan_experiments, preprocess)
    t0 = time.time()
    extract_fingerprints([DS], num_processes=8, check_dataset_integrity=True)
    plan_experiments([DS])
    preprocess([DS], configurations=("3d_fullres",), num_processes=(8,))
    plans = json.load(open(f"{work}/pre/{NAME}/nnUNetPlans.json"))
    c = plans["configurations"]["3d_fullres"]
    print(json.dumps({"prepared_s": round(time.time() - t0, 1), "patch_size": c["patch_size"],
                      "batch_size": c["batch_size"], "labels": nl}))

def trainer_class(variant):
    from batchgeneratorsv2.transforms.spatial.spatial import SpatialTransform
    from nnunetv2.training.nnUNetTrainer.nnUNetTrainer import nnUNetTrainer
    if variant.startswith("augscope"):
        os.environ["AUGSCOPE_PRESET"] = "batchgenerators" if "elastic" in variant else "nnunet-v2"
        # augscope-workers: the cases stay in nnU-Net's data-loader workers (not on the GPU)
        os.environ["AUGSCOPE_RESIDENT"] = "0" if "workers" in variant else "auto"
        from augscope.nnunet import nnUNetTrainerAugscopeGPU as base
        return base
    if variant == "default":
        return nnUNetTrainer
    if variant == "noda":
        from nnunetv2.training.nnUNetTrainer.variants.data_augmentation.nnUNetTrainerNoDA import \
            nnUNetTrainerNoDA
        return nnUNetTrainerNoDA

    class nnUNetTrainerElastic(nnUNetTrainer):
        """nnU-Net's pipeline with its SpatialTransform's elastic deformation on (p 0.2)."""
        @staticmethod
        def get_training_transforms(*a, **k):
            c = nnUNetTrainer.get_training_transforms(*a, **k)
            for t in c.transforms:
                if isinstance(t, SpatialTransform):
                    t.p_elastic_deform = 0.2
            return c
    return nnUNetTrainerElastic

def trainer(work, variant):
    """The variant's trainer over the prepared dataset (3d_fullres, fold 0), on E2E_DEVICE."""
    import torch
    from batchgenerators.utilities.file_and_folder_operations import load_json
    cls = trainer_class(variant)
    pre = f"{work}/pre/{NAME}"
    plans = load_json(f"{pre}/nnUNetPlans.json"); dsj = load_json(f"{pre}/dataset.json")
    plans["continue_training"] = False
    dev = torch.device(os.environ.get("E2E_DEVICE", "cuda"))
    return cls(plans, "3d_fullres", 0, dsj, device=dev), dev

def train(work, variant, iters):
    env(work)
    import torch
    tr, dev = trainer(work, variant)
    t0 = time.time()
    tr.on_train_start()
    start_s = time.time() - t0
    tr.on_epoch_start(); tr.on_train_epoch_start()
    import resource
    waits, steps, losses = [], [], []
    cpu0, t_cpu0 = None, None
    for i in range(iters):
        if i == min(10, iters // 4):
            cpu0, t_cpu0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        a = time.perf_counter(); batch = next(tr.dataloader_train)
        b = time.perf_counter(); out = tr.train_step(batch)
        if dev.type == "cuda": torch.cuda.synchronize()
        c = time.perf_counter()
        waits.append(b - a); steps.append(c - b); losses.append(float(out["loss"]))
    skip = min(10, iters // 4)
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    w, s = waits[skip:], steps[skip:]
    it = [x + y for x, y in zip(w, s)]
    import statistics as st
    res = {"variant": variant, "n_proc_DA": int(os.environ.get("nnUNet_n_proc_DA", "12")),
           "iters_timed": len(it), "start_s": round(start_s, 1),
           "iter_ms_median": round(1e3 * st.median(it), 1), "iter_ms_mean": round(1e3 * st.mean(it), 1),
           "wait_ms_mean": round(1e3 * st.mean(w), 1), "step_ms_mean": round(1e3 * st.mean(s), 1),
           "gpu_busy_frac": round(sum(s) / sum(it), 3),
           "patch": [int(x) for x in tr.configuration_manager.patch_size],
           "batch": int(tr.configuration_manager.batch_size),
           "loss_first_last": [round(losses[0], 4), round(losses[-1], 4)],
           "train_loader": type(tr.dataloader_train).__name__,
           # CPU time of the training process itself (not its workers) over the timed
           # iterations, in cores
           "train_process_cores": round((cpu.ru_utime + cpu.ru_stime - cpu0.ru_utime
                                         - cpu0.ru_stime) / (time.perf_counter() - t_cpu0), 2)}
    print(json.dumps(res), flush=True)
    import multiprocessing
    for ch in multiprocessing.active_children():   # the augmenters' workers
        ch.terminate()
    os._exit(0)

def converge(work, variant, seed, epochs, iters, val_iters):
    """A short real training: EPOCHS epochs of ITERS iterations, each followed by VAL_ITERS
    validation batches; nnU-Net's pseudo-Dice (mean foreground Dice over the validation batches)
    per epoch, and its EMA as nnU-Net's logger keeps it. The learning rate decays over the EPOCHS
    (nnU-Net's poly schedule with num_epochs = EPOCHS)."""
    env(work)
    os.environ["AUGSCOPE_SEED"] = str(seed)
    import random
    import numpy as np
    import torch
    random.seed(seed); np.random.seed(seed); torch.manual_seed(seed)
    tr, _ = trainer(work, variant)
    tr.num_epochs, tr.num_iterations_per_epoch = epochs, iters
    tr.num_val_iterations_per_epoch = val_iters
    t0 = time.time()
    tr.on_train_start()
    dice, ema, losses = [], [], []
    for epoch in range(epochs):
        tr.on_epoch_start(); tr.on_train_epoch_start()
        outs = [tr.train_step(next(tr.dataloader_train)) for _ in range(iters)]
        tr.on_train_epoch_end(outs)
        with torch.no_grad():
            tr.on_validation_epoch_start()
            val = [tr.validation_step(next(tr.dataloader_val)) for _ in range(val_iters)]
            tr.on_validation_epoch_end(val)
        d = float(tr.logger.get_value("mean_fg_dice", step=-1))
        dice.append(round(d, 4))
        ema.append(round(d if not ema else 0.9 * ema[-1] + 0.1 * d, 4))
        losses.append(round(float(tr.logger.get_value("train_losses", step=-1)), 4))
        tr.current_epoch += 1
    print(json.dumps({"variant": variant, "seed": seed, "epochs": epochs, "iters": iters,
                      "val_iters": val_iters, "pseudo_dice": dice, "pseudo_dice_ema": ema,
                      "train_loss": losses, "seconds": round(time.time() - t0, 1)}), flush=True)
    import multiprocessing
    for ch in multiprocessing.active_children():
        ch.terminate()
    os._exit(0)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "prepare":
        prepare(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]) if len(sys.argv) > 5 else 8)
    elif cmd == "converge":
        converge(sys.argv[2], sys.argv[3], *[int(a) for a in sys.argv[4:8]])
    else:
        train(sys.argv[2], sys.argv[3], int(sys.argv[4]))
