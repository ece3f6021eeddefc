"""Helpers the tests share: a real Jupyter kernel, process checks, a class of submissions."""
