"""Tools that look at a trained or built attention layer: diagonal dominance, convolution as
attention, head importance and pruning, head roles, costs and measurements. They import layers
only."""
