"""`python -m autotune.sim [SGLang flags] --sim-gpu GPU ...`: the simulated SGLang engine."""

import sys

from autotune.sim.main import main

if __name__ == "__main__":
    sys.exit(main())
