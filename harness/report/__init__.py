"""Verdicts -> verdict.json, report.md, timeline.png, summaries over runs; `verify` and `report` are built here."""
