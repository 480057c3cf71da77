"""The shipped minis' trainers (docs/design.md, "The minis' trainers"): one training loop
(:mod:`lengthx.minis.loop`) and one recipe per mini: the retrieval stand-in mini-t5
(:mod:`lengthx.minis.retrieval`), the T5-LM stand-in mini-t5-lm (:mod:`lengthx.minis.t5_lm`) and the decoder
minis of paper B (:mod:`lengthx.minis.decoders`); :mod:`lengthx.minis.ship` copies a study's picked snapshot
into the package. ``scripts/train_mini_*.py`` are their entry points."""
