"""llama.cpp engine adapter (placeholder while writing)."""
