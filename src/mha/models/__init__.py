"""Whole models made of the layers: encoder, decoder, translator, the pretrained MiniLM, and the
recipes of the shipped weights (`mha/data`). They import layers, tasks and analysis."""
