"""The report: reproduce experiments and write their figures, tables, claims and pages."""
