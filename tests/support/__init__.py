"""Helpers shared by the test suite (test modules never import each other)."""
