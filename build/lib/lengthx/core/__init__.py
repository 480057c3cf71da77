"""The harness's core: cells and their hashes, the results store, and the one sweep loop that runs
paper A's cells, dispersal statistics and paper B's perplexity (docs/design.md §1, §7).
"""
