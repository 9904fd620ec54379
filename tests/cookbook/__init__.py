"""Cookbook tasks, one module per domain (each defines TASKS); tests/e2e/test_cookbook.py runs them all."""
