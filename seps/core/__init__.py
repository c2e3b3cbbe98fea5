"""The head and its functional core, SPEC.md as code: the frozen configuration and its
presets (:mod:`.config`), patch selection (:mod:`.selection`), aggregation
(:mod:`.aggregation`), alignment (:mod:`.alignment`), the per-step pieces and the batched
head (:mod:`.head_steps`, :mod:`.head_inputs`, :mod:`.head`), the losses
(:mod:`.losses`), the per-pair reference loop (:mod:`.reference`), chunked evaluation
(:mod:`.chunking`), recalls (:mod:`.metrics`), evaluation protocols (:mod:`.evaluate`) and
the kernels (:mod:`.kernels`). Imports only :mod:`seps.runtime` below it.
"""
