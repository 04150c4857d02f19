"""Reports: merge a run's result files into tables and plots (``python -m reports.merge RUN_DIR``)."""
