"""What a run leaves for people: its files as it goes, its summary, its HTML report, progress.

`recorder.py` writes a dispatch run's files and calls what records elsewhere; `result.py` is the
result every dispatch flow hands back; `summary.py` and `ranking.py` the text summary;
`html_report.py`, `html_page.py`, `plots.py`, `run_view.py` the HTML report of a run folder,
`db_report.py` the one across runs, `deployment.py` a model report's headline; `replay.py`
re-measures a winner; `reuse.py` what a run takes from the database; `progress.py` the one
progress facility (the bar, and the Python API's `on_progress` events).
"""
