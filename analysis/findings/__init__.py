"""A study's findings: what each side measures (measures, quantities), the learning gate, intervals over seeds and
items, verdicts under Holm, power, and the registrations a study makes before its runs. Reads tables; writes no
report."""
