"""spark_export: Trocket as a PySpark data source and sink, and the export job.

Not implemented yet (issue 8). This package is deliberately empty and is not declared as an
entry point, so a config that lists `spark_export` fails at start with "unknown plugin 'spark_export'" and the
list of plugins that do exist, instead of running without it.
"""
