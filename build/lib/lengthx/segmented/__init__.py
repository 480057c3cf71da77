"""Paper B, segmented training: continued pre-training on short sequences sampled from long ones at
their original positions (chunk-α, prefix-α; :mod:`~lengthx.segmented.sampling`), position-encoding
extensions (:mod:`~lengthx.segmented.positions`, :mod:`~lengthx.segmented.models`), the training run
(:mod:`~lengthx.segmented.plan`, :mod:`~lengthx.segmented.loop`, :mod:`~lengthx.segmented.checkpoints`) and
the length handling of its evaluation (:mod:`~lengthx.segmented.lengths`).
"""
