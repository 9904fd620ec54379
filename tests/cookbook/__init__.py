"""Cookbook tasks, one module per domain (each defines TASKS); tests/test_cookbook.py runs them all."""
