"""The backbones and the model: image and text encoders (:mod:`.encoders`) and the
retrieval model they form with the head (:mod:`.seps_model`).
"""
