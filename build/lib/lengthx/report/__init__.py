"""Everything a reader sees: the tables of both papers (:mod:`~lengthx.report.tables`) and their figures
(:mod:`~lengthx.report.figures`), rendered from the results store.
"""
