"""Reports: a run folder into tables and plots (``python -m reports.merge RUN_DIR``), two runs compared
(``python -m reports.compare RUN_A RUN_B``)."""
