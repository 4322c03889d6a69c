"""Helpers that build test fixtures real engines can load (GGUF models with random weights)."""
