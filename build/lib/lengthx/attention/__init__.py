"""Attention-level operations of paper A: temperature (§4), statistics capture (Algorithm 1), efficient T5 attention."""
