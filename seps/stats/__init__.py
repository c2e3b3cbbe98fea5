"""Statistics of the reports, pure functions: paired tests, Holm, power
(:mod:`.paired`), and group-sequential designs (:mod:`.group_sequential`).
"""
