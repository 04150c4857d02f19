"""The experiment runner (``python -m llmload.runner``): the top layer, which starts servers and runs the matrix."""
