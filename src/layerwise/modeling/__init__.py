"""layerwise.modeling"""
