"""Run and study folders turned into tables (tables/), findings judged (findings/) and reports written (reports/),
each sub-package importing only those before it."""
