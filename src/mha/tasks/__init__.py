"""Toy tasks and data sets the chapters train and measure on (lookup, neighbour, position,
sentence pairs, the Python corpus). They import layers only."""
