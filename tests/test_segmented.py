"""Paper B §3.1 samplers and collator: chunk-α / prefix-α properties over many seeds and shapes."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch

from lengthx.segmented.sampling import (
    IGNORE_INDEX,
    SegmentedCollator,
    SegmentMethod,
    chunk_sample,
    collate_segmented,
    labels_from_mask,
    prefix_bounds,
    prefix_sample,
    sample_generator,
)

# (L_e, L_t, α): the paper's α values, L_e = L_t (degenerate), odd L_e, large β
CHUNK_CASES = [
    (64, 16, 0.25),
    (64, 16, 0.5),
    (64, 16, 0.125),
    (16, 16, 0.25),
    (17, 16, 0.25),
    (1000, 64, 0.125),
    (40, 8, 0.5),
    (4096, 1024, 0.25),
    (130, 32, 0.25),
]
PREFIX_CASES = [
    (64, 16, 0.25),
    (64, 16, 0.5),
    (18, 16, 0.25),
    (1000, 64, 0.5),
    (4096, 1024, 0.25),
    (130, 32, 0.5),
]
SEEDS = range(60)


def _runs(pos: torch.Tensor) -> list[torch.Tensor]:
    """Maximal runs of consecutive positions."""
    breaks = (torch.diff(pos) != 1).nonzero().flatten() + 1
    return list(torch.tensor_split(pos, breaks.tolist()))


@pytest.mark.parametrize("l_e,l_t,alpha", CHUNK_CASES)
def test_chunk_positions_sorted_unique_in_range_and_segmented(l_e, l_t, alpha):
    seg = round(alpha * l_t)
    for seed in SEEDS:
        pos = chunk_sample(l_e, l_t, alpha, torch.Generator().manual_seed(seed))
        assert pos.dtype == torch.long and pos.shape == (l_t,)
        assert torch.all(pos[1:] > pos[:-1]), "sorted and unique"
        assert pos.min() >= 0 and pos.max() < l_e
        # 1/α blocks of αL_t contiguous positions, each after the previous one
        blocks = pos.view(round(1 / alpha), seg)
        assert torch.all(torch.diff(blocks, dim=1) == 1)
        assert torch.all(blocks[1:, 0] >= blocks[:-1, -1] + 1)
        # maximal runs are unions of whole segments
        assert all(len(r) % seg == 0 for r in _runs(pos))


def test_chunk_of_one_full_sequence_is_contiguous():
    for seed in range(5):
        assert torch.equal(chunk_sample(32, 32, 0.25, torch.Generator().manual_seed(seed)), torch.arange(32))


def test_chunk_placements_are_uniform():
    # L_e=6, L_t=2, α=0.5: two 1-token segments = a uniform 2-subset of 6 positions (15 placements)
    counts = Counter(
        tuple(chunk_sample(6, 2, 0.5, torch.Generator().manual_seed(s)).tolist()) for s in range(3000)
    )
    assert set(counts) == set(itertools.combinations(range(6), 2))
    assert max(counts.values()) < 1.35 * 200 and min(counts.values()) > 0.65 * 200
    # L_e=7, L_t=4, α=0.5: two 2-token segments, all C(5,2)=10 placements (adjacent ones included)
    starts = Counter(
        tuple(chunk_sample(7, 4, 0.5, torch.Generator().manual_seed(s))[::2].tolist()) for s in range(2000)
    )
    assert len(starts) == 10 and (1, 3) in starts and (0, 5) in starts


def test_sampling_is_reproducible_from_the_generator():
    a = chunk_sample(512, 64, 0.25, torch.Generator().manual_seed(7))
    b = chunk_sample(512, 64, 0.25, torch.Generator().manual_seed(7))
    c = chunk_sample(512, 64, 0.25, torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)
    p1, m1 = prefix_sample(512, 64, 0.25, torch.Generator().manual_seed(3))
    p2, m2 = prefix_sample(512, 64, 0.25, torch.Generator().manual_seed(3))
    assert torch.equal(p1, p2) and torch.equal(m1, m2)
    # the global RNG is not consulted
    torch.manual_seed(0)
    x = chunk_sample(512, 64, 0.25, torch.Generator().manual_seed(1))
    torch.manual_seed(123)
    assert torch.equal(x, chunk_sample(512, 64, 0.25, torch.Generator().manual_seed(1)))


@pytest.mark.parametrize("l_e,l_t,alpha", PREFIX_CASES)
def test_prefix_suffix_contiguous_prefix_below_and_loss_on_suffix(l_e, l_t, alpha):
    n_suffix = round(alpha * l_t)
    n_prefix = l_t - n_suffix
    for seed in SEEDS:
        pos, mask = prefix_sample(l_e, l_t, alpha, torch.Generator().manual_seed(seed))
        assert pos.shape == (l_t,) and mask.shape == (l_t,) and mask.dtype == torch.bool
        assert torch.all(pos[1:] > pos[:-1]) and pos.min() >= 0 and pos.max() < l_e
        suffix, prefix = pos[n_prefix:], pos[:n_prefix]
        i = int(suffix[0])
        assert (1 - alpha) * l_t < i < l_e - alpha * l_t, "the paper's strict bounds on i"
        assert torch.equal(suffix, torch.arange(i, i + n_suffix)), "contiguous suffix of αL_t"
        assert torch.all(prefix < i), "every prefix position precedes the suffix"
        assert torch.equal(mask, torch.arange(l_t) >= n_prefix), "loss only on the suffix"


def test_prefix_start_covers_its_whole_range():
    lo, hi = prefix_bounds(20, 8, 0.5)
    assert (lo, hi) == (5, 15)
    seen = {int(prefix_sample(20, 8, 0.5, torch.Generator().manual_seed(s))[0][4]) for s in range(600)}
    assert seen == set(range(lo, hi + 1))


def test_invalid_arguments_fail_clearly():
    with pytest.raises(ValueError, match="alpha"):
        chunk_sample(64, 16, 0.0)
    with pytest.raises(ValueError, match="integer"):
        chunk_sample(64, 16, 0.3)  # αL_t = 4.8
    with pytest.raises(ValueError, match="divides"):
        chunk_sample(64, 12, 5 / 12)  # αL_t = 5 is an integer but 1/α is not
    with pytest.raises(ValueError, match="L_e"):
        chunk_sample(8, 16, 0.25)
    with pytest.raises(ValueError, match="no valid suffix start"):
        prefix_sample(16, 16, 0.25)
    with pytest.raises(ValueError, match="unknown segmented method"):
        SegmentMethod.parse("chunky-0.25")
    with pytest.raises(ValueError, match="needs 0 < alpha"):
        SegmentMethod.parse("chunk")


def test_method_names_and_lengths():
    assert (
        SegmentMethod.parse("chunk-0.25")
        == SegmentMethod("chunk", 0.25)
        == SegmentMethod.parse("chunk", 0.25)
    )
    assert SegmentMethod.parse("prefix", alpha=0.5).name == "prefix-0.5"
    assert SegmentMethod.parse("full").name == "full" and SegmentMethod.parse("DA").name == "da"
    with pytest.raises(ValueError, match="conflicts"):
        SegmentMethod.parse("chunk-0.25", alpha=0.5)
    chunk, full, da = (
        SegmentMethod.parse("chunk-0.25"),
        SegmentMethod.parse("full"),
        SegmentMethod.parse("da"),
    )
    assert (chunk.source_length(16, 64), chunk.train_length(16, 64)) == (64, 16)
    assert (full.source_length(16, 64), full.train_length(16, 64)) == (64, 64)
    assert (da.source_length(16, 64), da.train_length(16, 64)) == (16, 16)


def test_labels_keep_predictions_whose_input_and_target_carry_the_mask():
    ids = torch.arange(10, 18)
    mask = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1], dtype=torch.bool)
    labels = labels_from_mask(ids, mask)
    assert labels.tolist() == [IGNORE_INDEX] * 5 + [15, 16, 17]
    assert torch.equal(labels_from_mask(ids, torch.ones(8, dtype=torch.bool)), ids)


def test_collate_keeps_original_positions_and_tokens():
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 1000, (64,), generator=g) for _ in range(3)]
    gens = [sample_generator(5, k) for k in range(3)]
    chunk = collate_segmented(seqs, SegmentMethod.parse("chunk-0.25"), 16, gens)
    assert chunk["input_ids"].shape == chunk["position_ids"].shape == chunk["labels"].shape == (3, 16)
    assert torch.equal(chunk["attention_mask"], torch.ones(3, 16, dtype=torch.long))
    for b in range(3):
        assert torch.equal(chunk["input_ids"][b], seqs[b][chunk["position_ids"][b]])
        assert torch.equal(chunk["position_ids"][b], chunk_sample(64, 16, 0.25, sample_generator(5, b)))
    assert torch.equal(chunk["labels"], chunk["input_ids"])  # chunk: loss on all tokens

    prefix = collate_segmented(
        seqs, SegmentMethod.parse("prefix-0.25"), 16, [sample_generator(5, k) for k in range(3)]
    )
    assert torch.all(prefix["labels"][:, :13] == IGNORE_INDEX)  # prefix (12) + the first suffix target
    assert torch.equal(prefix["labels"][:, 13:], prefix["input_ids"][:, 13:])
    assert torch.equal(prefix["loss_mask"], (torch.arange(16) >= 12).expand(3, -1))

    full = collate_segmented(seqs, SegmentMethod.parse("full"), 16)
    assert torch.equal(full["position_ids"], torch.arange(64).expand(3, -1))
    assert torch.equal(full["input_ids"], torch.stack(seqs))


def test_collator_sample_depends_only_on_the_global_index():
    seqs = [torch.arange(100, 164) + 1000 * k for k in range(4)]
    coll = SegmentedCollator("prefix-0.5", 16, seed=3)
    batch = coll([{"input_ids": s, "index": k} for k, s in enumerate(seqs)])
    alone = coll([{"input_ids": seqs[2], "index": 2}])
    assert torch.equal(batch["position_ids"][2], alone["position_ids"][0])
    other_seed = SegmentedCollator("prefix-0.5", 16, seed=4)([{"input_ids": seqs[2], "index": 2}])
    assert not torch.equal(other_seed["position_ids"][0], alone["position_ids"][0])
