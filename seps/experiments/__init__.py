"""What an experiment is, as data: the ablation definitions (matrices, profiles,
differences: :mod:`.definitions`, :mod:`.ablation_index`, their checks
:mod:`.definition_checks`, ``--set`` :mod:`.overrides`), campaigns (:mod:`.campaigns`),
when a record is stale (:mod:`.staleness`) and what machine and weights made it
(:mod:`.provenance`).
"""
