"""ftrt.analysis: tools that read a job's JSON report; they do not load libftrt.

  project  goodput / ETTR at scale projected from the measured recovery costs
           (``python3 -m ftrt.analysis.project REPORT.json``, the ``ftrt-project`` script;
           docs/goodput-projection.md). Needs numpy for its simulation, matplotlib for --plot.
  plot     the run's timeline as a Gantt chart (``python3 -m ftrt.analysis.plot REPORT.json``,
           the ``ftrt-plot`` script). Needs matplotlib.

Importing this package imports neither submodule (nor numpy or matplotlib).
"""
__all__ = ["project", "plot"]
