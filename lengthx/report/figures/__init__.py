"""Figures of paper A (:mod:`~lengthx.report.figures.paper_a`), paper B (:mod:`~lengthx.report.figures.paper_b`)
and temperature vs segmented training (:mod:`~lengthx.report.figures.tau_vs_segmented`)."""
