"""Run and study folders read into tables: pretraining runs and curves, a study's rows per run and over seeds, what a
study's findings read, diagnostics tables, a curves study's points. The floor of analysis: it imports neither
findings nor reports."""
