"""Run summaries (``summary.py``) and cross-run reports: loading (``runs.py``), paired CIs (``compare.py``),
figures (``plots.py``) and the Markdown/HTML report (``report.py``, ``write_report``)."""


def __getattr__(name):  # lazy: importing the summary must not pull in matplotlib
    if name in ("write_report", "build_report"):
        from evolve_train.reporting import report

        return getattr(report, name)
    raise AttributeError(f"module 'evolve_train.reporting' has no attribute '{name}'")
