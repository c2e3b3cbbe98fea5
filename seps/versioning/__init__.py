"""What names a record's code and data: the code version (:mod:`.version`, a hash of
what the training path runs, by behaviour, :mod:`.code_closure`) and the fingerprint of
a dataset's files (:mod:`.data_fingerprint`).
"""
