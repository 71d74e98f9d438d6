"""Experience kept as data: record a job's batches to Parquet or Minari, and replay a
recording into a job's stream (``docs/datasets.md``).

Needs the ``datasets`` extra (pyarrow; minari for Minari datasets): not in the worker image.
"""
