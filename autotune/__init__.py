"""autotune: unattended tuning of LLM serving engines and their Triton kernels.

Importing this package is cheap: torch, triton, ray and optuna are imported lazily by the
modules that need them, so ``autotune --help`` stays instant.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
