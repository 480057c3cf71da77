"""Tables of both papers: specs (``spec.py``, ``paper_a.py``, ``paper_b.py``) and one renderer (``render.py``)."""

from lengthx.tables.paper_a import PAPER_A_SPECS
from lengthx.tables.paper_b import PAPER_B_SPECS
from lengthx.tables.render import Rendered, latest_ok, model_info, read_paper_table, render, tables_main
from lengthx.tables.spec import Column, Row, TableSpec

TABLES: dict[str, TableSpec] = {spec.id: spec for spec in PAPER_A_SPECS + PAPER_B_SPECS}

__all__ = ["TABLES", "Column", "Rendered", "Row", "TableSpec", "latest_ok", "model_info", "read_paper_table",
           "render", "tables_main"]
