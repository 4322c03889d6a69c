"""Engine processes: start in their own group on a free port, wait ready, stop by group (P9)."""

from autotune.process.manager import EngineProcess, StopReport
from autotune.process.ports import free_port, port_is_free, wait_port_free
from autotune.process.registry import PidRegistry

__all__ = [
    "EngineProcess",
    "PidRegistry",
    "StopReport",
    "free_port",
    "port_is_free",
    "wait_port_free",
]
