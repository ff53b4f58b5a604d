"""Nexmark on weir (issue 42): the field's own streaming benchmark.

- :mod:`bench.nexmark.generator`: Nexmark's event generator (persons, auctions,
  bids), deterministic from a seed, written as Parquet or used in-process.
- :mod:`bench.nexmark.queries`: q0-q8, q11, q12 and q20 in weir's PyFlink API.
- :mod:`bench.nexmark.reference`: each query as a plain Python loop over the same
  Parquet data: the checker of weir's output and the one-core floor.
- ``python3 -m bench.nexmark``: generates the data, times the floor and weir at
  each parallelism (and Flink, through ``bench.nexmark.flink_sql``), checks weir's
  output, prints the table.
"""
