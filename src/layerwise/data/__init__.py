"""layerwise.data"""
