"""Run summaries (``summary.py``) and cross-run reports: finding runs (``runs.py``), grouping seeds and their
statistics (``seeds.py``, ``seed_sections.py``), figures (``plots.py``) and the Markdown/HTML report (``report.py``,
``write_report``). Rows and runs are read by ``evaluation/rows.py``; paired CIs come from
``evaluation/compare.py``, the comparison ``evolve-gate`` uses too."""


def __getattr__(name):  # lazy: importing the summary must not pull in matplotlib
    if name in ("write_report", "build_report"):
        from evolve_train.reporting import report

        return getattr(report, name)
    raise AttributeError(f"module 'evolve_train.reporting' has no attribute '{name}'")
