"""layerwise.training"""
