"""``sago report``: one self-contained HTML file (inline SVG plots, sortable tables) for a run."""

from sago_fast.report.page import render_report, write_report

__all__ = ["render_report", "write_report"]
