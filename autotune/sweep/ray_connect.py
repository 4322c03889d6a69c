"""Joining an existing Ray cluster (--ray-address): the head's port and authentication are
checked in seconds, then ray.init(); every failure is a ConfigError naming --ray-address that
says why and what to do. Apart from ray_executor.py so that the executors stay under the size
rule; `import ray` stays inside the functions.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any
from urllib.parse import urlsplit

RAY_ADDRESS_FIELD = "--ray-address (execution.ray_address)"
RAY_REACH_TIMEOUT_S = 5.0
RAY_PROBE_TIMEOUT_S = 10.0
AUTH_MODE_ENV = "RAY_AUTH_MODE"  # Ray's switch: "token" or "disabled"; unset: Ray decides


def connect_ray(ray: Any, address: str) -> None:
    """Join the Ray cluster at `address` (`ray start --head` there, or "auto": the one of this
    machine or RAY_ADDRESS), with a token where the head asks for one; a ConfigError naming
    --ray-address that says why not and what to do.

    The port and the head's authentication are checked first, in seconds: ray.init() retries
    an unreachable address, or a refused one, for minutes."""
    from autotune.errors import ConfigError

    head_address = _head_address(address)
    token = os.environ.get(AUTH_MODE_ENV, "").lower() == "token"
    if head_address and os.environ.get(AUTH_MODE_ENV) is None:  # the user's RAY_AUTH_MODE stands
        head = _ask_head(head_address)
        if head == "silent":
            raise ConfigError(
                f"{head_address} accepts connections but does not answer as a Ray head within "
                f"{RAY_PROBE_TIMEOUT_S:g} s; give the address `ray start --head` printed (its "
                "--port, 6379 by default), not the dashboard's or the Ray Client's",
                field=RAY_ADDRESS_FIELD,
            )
        if head == "token":
            if not _use_token():
                raise ConfigError(_no_token(address, token=False), field=RAY_ADDRESS_FIELD)
            token = True
            if _ask_head(head_address) == "token":  # asked again with the token: a wrong one
                raise ConfigError(_no_token(address, token=True), field=RAY_ADDRESS_FIELD)
    try:
        # "auto" as the address it stands for: given "auto", Ray turns token authentication on
        # whenever a token exists, also for an open head (whose workers then fail)
        ray.init(address=head_address or address, log_to_driver=False, configure_logging=False)
    except Exception as exc:  # ConnectionError, RuntimeError, AuthenticationError, ValueError
        raise ConfigError(_join_failure(address, exc, token), field=RAY_ADDRESS_FIELD) from exc


def _head_address(address: str) -> str | None:
    """The HOST:PORT of the head (GCS) to join, its port tried (a ConfigError if it cannot be
    reached): `address` itself, or for "auto" the cluster Ray would join. None where that is
    left to Ray: a Ray Client address (ray://HOST:PORT, only its port tried), or a form Ray
    resolves on its own."""
    from autotune.errors import ConfigError

    if address == "auto":
        try:
            from ray._private.services import canonicalize_bootstrap_address
        except ImportError:
            return None
        try:
            found = canonicalize_bootstrap_address("auto")
        except ConnectionError:
            raise ConfigError(
                "auto found no running Ray cluster on this machine (nor in "
                "RAY_ADDRESS); start one with `ray start --head`, or give the head's HOST:PORT",
                field=RAY_ADDRESS_FIELD,
            ) from None
        if not found:
            return None
        address = found
    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ConfigError(
            f"expected HOST:PORT (the address `ray start --head` printed), got {address!r}",
            field=RAY_ADDRESS_FIELD,
        ) from None
    if not host or port is None:
        return None
    try:
        socket.create_connection((host, port), timeout=RAY_REACH_TIMEOUT_S).close()
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise ConfigError(
            f"cannot reach the Ray cluster at {address} ({why}); start its head there with "
            f"`ray start --head --port={port}` and make sure this machine can reach that port, "
            "or leave --ray-address out to run trials on a Ray instance of this machine",
            field=RAY_ADDRESS_FIELD,
        ) from None
    return None if "://" in address else address


def _ask_head(address: str) -> str | None:
    """How the head at `address` takes a driver that has no token: "open" (it does), "token"
    (it refuses: token authentication), "silent" (no answer: not a Ray head), None (unknown:
    a Ray without token authentication, or another error, left to ray.init).

    A driver must use the head's mode: a driver with a token joins an open head, but the
    workers that head starts cannot then reach the driver, and every actor dies."""
    try:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]
        from ray.exceptions import AuthenticationError
    except ImportError:
        return None
    answer: list[str | None] = []

    def ask() -> None:
        try:
            GcsClient(address=address)
        except AuthenticationError:
            answer.append("token")
        except Exception:  # reported by ray.init
            answer.append(None)
        else:
            answer.append("open")

    # A daemon thread: the client gives up on a port that is not a head only after ~40 s.
    asking = threading.Thread(target=ask, name="ray-auth-probe", daemon=True)
    asking.start()
    asking.join(RAY_PROBE_TIMEOUT_S)
    return answer[0] if answer else "silent"


def _use_token() -> bool:
    """Turn on token authentication for this process (Ray's own switch) where the user has a
    token: RAY_AUTH_TOKEN, a file named by RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token. False,
    and nothing changed, without one: no token is ever made up."""
    try:
        from ray._private.authentication import authentication_token_setup as auth
    except ImportError:  # a Ray without token authentication
        return False
    enable = getattr(auth, "maybe_enable_token_auth_if_token_available", None)
    if enable is None:
        return False
    quiet = logging.getLogger(auth.__name__)
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # its warning is written for a head, not for a driver
    try:
        return bool(enable(warn_if_disabled=False))
    finally:
        quiet.setLevel(level)


def _no_token(address: str, *, token: bool) -> str:
    fix = (
        "put the head's token (`ray get-auth-token` on the head) in RAY_AUTH_TOKEN, in a file "
        "named by RAY_AUTH_TOKEN_PATH, or in ~/.ray/auth_token on this machine"
    )
    if token:
        return f"the Ray cluster at {address} refused this machine's token; {fix}"
    return (
        f"the Ray cluster at {address} requires token authentication and this machine has no "
        f"token; {fix} (or start the head with RAY_AUTH_MODE=disabled, on a trusted network "
        "only)"
    )


def _join_failure(address: str, exc: BaseException, token: bool) -> str:
    """What went wrong joining the cluster, read from Ray's exception chain, and the fix."""
    texts: list[str] = []
    cur: BaseException | None = exc
    while cur is not None and len(texts) < 8:
        texts.append(f"{type(cur).__name__}: {cur}")
        cur = cur.__cause__ or cur.__context__
    chain = "\n".join(texts)
    if "AuthenticationError" in chain or "InvalidAuthToken" in chain:
        return _no_token(address, token=token)
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return (
        f"cannot join the Ray cluster at {address}: {first[:300]}; check that `ray status "
        f"--address {address}` works on this machine (Ray and Python must be the versions the "
        "cluster runs)"
    )
