"""``python -m lengthx.cli``: the ``lengthx`` command."""

from lengthx.cli import main

main()
