"""Figures of paper A (:mod:`~lengthx.report.figures.paper_a`) and paper B (:mod:`~lengthx.report.figures.paper_b`)."""
