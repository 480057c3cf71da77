"""Tables of both papers: specs (``spec.py``, ``paper_a.py``, ``paper_b.py``, and ``tau_vs_segmented.py`` beyond
both), one renderer (``render.py``), intervals, cell counts and the README blocks. :data:`TABLES` is the registry
of result tables, by table id; :data:`DESCRIPTIVE` that of the tables made of the model configs
(``descriptive.py``)."""

from lengthx.report.tables.descriptive import DESCRIPTIVE_TABLES, DescriptiveTable
from lengthx.report.tables.paper_a import PAPER_A_SPECS
from lengthx.report.tables.paper_b import PAPER_B_SPECS
from lengthx.report.tables.spec import TableSpec
from lengthx.report.tables.tau_vs_segmented import EXTENSION_SPECS

TABLES: dict[str, TableSpec] = {spec.id: spec for spec in PAPER_A_SPECS + PAPER_B_SPECS + EXTENSION_SPECS}

# tables of the model configs, not of results (paper A Table 2, paper B Table 1)
DESCRIPTIVE: dict[str, DescriptiveTable] = {t.id: t for t in DESCRIPTIVE_TABLES}

__all__ = ["DESCRIPTIVE", "TABLES"]
