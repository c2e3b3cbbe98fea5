"""The files the suite writes and reads: atomic writes, run records and locks
(:mod:`.store`), their fast field reader (:mod:`.record_fields`), checkpoints and caches
loaded as data only (:mod:`.safe_files`) and verified by content (:mod:`.derived`), hub
caches (:mod:`.hub`), and tables and plots as files (:mod:`.formatting`).
"""
