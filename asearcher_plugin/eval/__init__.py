"""Evaluation harness: datasets, metrics, runs and reports."""
