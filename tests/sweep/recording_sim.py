"""The simulated engine behind a recorder, for the secrets tests (the spec's `engine.launcher`).

It appends to $SIM_RECORD the SHA-256 of the secrets it was given (its --api-key, $HF_TOKEN,
$OPENAI_API_KEY), never the values, so a test can check that the engine got the real ones.
Then it prints its arguments as SGLang does (`server_args=...`, api key included) so that the
log holds the key, and runs the simulator; SIM_FAIL=1 makes it exit 1 instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys


def sha(value: str | None) -> str | None:
    return hashlib.sha256(value.encode()).hexdigest() if value is not None else None


def main() -> int:
    argv = sys.argv[1:]
    key = argv[argv.index("--api-key") + 1] if "--api-key" in argv else None
    record = {
        "api_key": sha(key),
        "HF_TOKEN": sha(os.environ.get("HF_TOKEN")),
        "OPENAI_API_KEY": sha(os.environ.get("OPENAI_API_KEY")),
    }
    with open(os.environ["SIM_RECORD"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
    print(f"server_args=ServerArgs(argv={argv!r}, api_key={key!r})", flush=True)
    if os.environ.get("SIM_FAIL") == "1":
        print("RuntimeError: simulated failure at startup", flush=True)
        return 1
    from autotune.sim.main import main as sim_main

    return sim_main(argv)


if __name__ == "__main__":
    sys.exit(main())
