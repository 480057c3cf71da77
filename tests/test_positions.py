"""``t5_relative_bucket`` against transformers' own T5 bucket function (paper A §3.2)."""

import pytest
import torch
from transformers.models.t5.modeling_t5 import T5Attention

from lengthx.alignment.statistics import t5_relative_bucket


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (32, 64), (16, 32)])
def test_bucket_matches_transformers(bidirectional, num_buckets, max_distance):
    g = torch.Generator().manual_seed(0)
    rel = torch.cat([torch.randint(-20000, 20000, (4000,), generator=g), torch.arange(-300, 301)])
    ours = t5_relative_bucket(rel, bidirectional, num_buckets, max_distance)
    ref = T5Attention._relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
    assert torch.equal(ours, ref)


def test_bucket_paper_formula_examples():
    # paper A §3.2: exact buckets for |m-n| < 8, keys after the query (n > m) in the upper half
    rel = torch.tensor([0, -1, -7, 1, 7, -8, 8, -127, -128, -10000, 10000])
    b = t5_relative_bucket(rel).tolist()
    assert b[:5] == [0, 1, 7, 17, 23]
    assert b[5] == 8 and b[6] == 24
    assert b[8] == b[9] == 15 and b[10] == 31  # beyond max_distance: the last bucket of each side
