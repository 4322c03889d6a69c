"""Plugins that engines load through entry points (`vllm.general_plugins`: `vllm_awq`).

Importing this package or its modules imports neither torch nor the engine: an engine loads
every installed plugin in every process, and a disabled one must cost nothing.
"""
