"""layerwise.regularization"""
