"""nnU-Net's data-loader workers draw torch's random decisions in lockstep; augscope's draws do
not.

nnU-Net v2 feeds training through batchgenerators' `NonDetMultiThreadedAugmenter` with
`seeds=None`: each forked worker reseeds numpy from the OS, but torch's random state is the
parent's copy in every worker. batchgeneratorsv2 draws with torch (which transforms fire, which
channels, the mirror axes, the noise), so the workers make the same decisions, batch for batch.
augscope draws sample j of epoch e from its own counter-based stream (seed + j + e * 2**32),
whatever process runs it.

The test runs the real augmenter and the real transforms (forked workers, as nnU-Net does) and
prints what it found."""
import multiprocessing

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("batchgeneratorsv2")
nondet = pytest.importorskip("batchgenerators.dataloading.nondet_multi_threaded_augmenter")

import augscope  # noqa: E402

WORKERS = 4


class Loader:
    """A data loader as nnU-Net's: it applies the transforms itself (the augmenter's `transform`
    is None) and says which worker made each batch."""

    def __init__(self):
        from batchgeneratorsv2.transforms.spatial.mirroring import MirrorTransform
        from batchgeneratorsv2.transforms.utils.random import RandomTransform
        self.mirror = MirrorTransform((0, 1, 2))
        self.gate = RandomTransform(MirrorTransform((0, 1, 2)), apply_probability=0.5)
        self.thread_id = None

    def set_thread_id(self, i):
        self.thread_id = i

    def __iter__(self):
        return self

    def __next__(self):
        torch_draws = [tuple(self.mirror.get_parameters()["axes"]) for _ in range(8)]
        fired = [bool(self.gate.get_parameters()["apply_transform"]) for _ in range(8)]
        return {"worker": self.thread_id, "mirror_axes": torch_draws, "fired": fired,
                "numpy": float(np.random.random())}


@pytest.mark.skipif(multiprocessing.get_start_method(allow_none=True) not in (None, "fork"),
                    reason="nnU-Net's workers are forked")
def test_forked_nnunet_workers_share_torch_draws_and_augscope_does_not():
    torch.manual_seed(1234)  # the trainer's process has drawn before the workers start
    aug = nondet.NonDetMultiThreadedAugmenter(Loader(), None, WORKERS, num_cached=2, seeds=None)
    try:
        first = {}
        for _ in range(200):
            b = next(aug)
            first.setdefault(b["worker"], b)
            if len(first) == WORKERS:
                break
    finally:
        aug._finish()
    assert len(first) == WORKERS, f"batches came from workers {sorted(first)}"
    batches = [first[w] for w in sorted(first)]
    # numpy was reseeded per worker: its draws differ
    assert len({b["numpy"] for b in batches}) == WORKERS
    # torch was not: every worker's first batch has the same mirror axes and firing decisions
    assert all(b["mirror_axes"] == batches[0]["mirror_axes"] for b in batches)
    assert all(b["fired"] == batches[0]["fired"] for b in batches)

    # augscope: the draw of sample j depends on j alone, so the samples the workers make differ
    # (sample j of worker w is j = w + WORKERS * k) and equal a single process's draws
    aug = augscope.Augment("nnunet-v2", seed=0)
    flips = [tuple(aug.draw([64, 64, 64], j)[0].get("flip") or []) for j in range(WORKERS)]
    assert len(set(flips)) > 1, flips
    print(f"\nnnU-Net's {WORKERS} forked workers, first batch each: mirror axes "
          f"{[b['mirror_axes'][:3] for b in batches]} (identical), numpy "
          f"{[round(b['numpy'], 3) for b in batches]} (reseeded); augscope's first "
          f"{WORKERS} samples flip {flips}")
