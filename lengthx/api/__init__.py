"""The public API of lengthx (``import lengthx``; every name in docs/api.md): plain transformers models and
tokenizers in, the papers' operations out.

- :mod:`~lengthx.api.attention`: τ applied and removed (paper A §4), the attention modules that carry it;
- :mod:`~lengthx.api.alignment`: dispersal statistics (§3.3), Algorithm 1 (§4), log τ and Propositions 1-2 (§5, §7);
- :mod:`~lengthx.api.segmented`: paper B's chunk-α / prefix-α samples, their collator, APE interpolation (§3);
- :mod:`~lengthx.api.data`: the shipped minis, a task's examples at exact lengths, results and training curves.

The commands run the same code underneath (:mod:`lengthx.alignment`, :mod:`lengthx.segmented`, the results
store); ``lengthx/__init__.py`` lists the names and imports each module on first use.
"""
