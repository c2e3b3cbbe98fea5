"""Running experiments into the result store: plan (:mod:`.run_plan`), run
(:mod:`.runner`, :mod:`.ray_backend`), reuse a twin record (:mod:`.twins`), build what a
run needs first (:mod:`.prebuild`, :mod:`.data_checks`), add seeds until decided
(:mod:`.until_decided`), show a store's state (:mod:`.status`), export records
(:mod:`.export`) and measure ratio weights (:mod:`.ratio_scale`).
"""
