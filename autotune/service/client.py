"""A typed-enough httpx client of `autotune serve` (used by `autotune --server URL ...`).

    with ServiceClient("http://127.0.0.1:8321") as c:    # token: $AUTOTUNE_TOKEN, or the file
        name = c.submit_sweep(Path("spec.yaml").read_text())["name"]
        for event, data in c.events(name):
            print(event, data)

HTTP errors become RemoteError (an AutotuneError) carrying the service's message, with the
exit code the local command would have had (bad input 2, no such sweep 6).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypedDict

from autotune.errors import AutotuneError, ConfigError
from autotune.jsontypes import JSONObject, JSONValue

if TYPE_CHECKING:
    import httpx

YAML_TYPE = "application/yaml"
# --max-trials, --wall-clock (wall_clock_s), --until, --workers, --executor; None: not given
OverrideValue = int | float | str | None


# The service's answers as JSON (autotune/service/schemas.py; datetimes are ISO text).


class JobJSON(TypedDict):
    kind: str
    state: str
    pid: int | None
    started_at: str | None
    ended_at: str | None
    exit_code: int | None
    runs: int
    started_by: str
    stop_requested: str | None
    overrides: JSONObject
    log_path: str
    log_tail: str | None
    note: str | None
    queue_position: int | None
    gpus: list[str] | None


class LinksJSON(TypedDict):
    status: str
    events: str
    stop: str
    resume: str
    report: str
    launch_sh: str
    winner_json: str


class SubmitJSON(TypedDict):
    """SubmitResult: POST /v1/sweeps and /v1/sweeps/{name}/resume."""

    name: str
    state: str
    job: JobJSON
    links: LinksJSON


class TrialBriefJSON(TypedDict):
    number: int | None
    status: str
    value: float | None
    values: list[float] | None
    config: JSONObject


class FailureJSON(TypedDict):
    trial: int | None
    failure_class: str
    reason: str


class ProgressJSON(TypedDict):
    launched: int
    max_trials: int | None
    fraction: float | None
    running: int
    elapsed_s: float | None
    eta_s: float | None


class SweepStatusJSON(TypedDict):
    """SweepStatusOut: GET /v1/sweeps/{name}, POST .../stop, the `end` event."""

    name: str
    state: str
    status: str | None
    engine: str | None
    engine_version: str | None
    model: str | None
    gpu: str | None
    simulated: bool
    created_at: str | None
    updated_at: str | None
    progress: ProgressJSON
    counts: dict[str, int]
    best: TrialBriefJSON | None
    baseline: TrialBriefJSON | None
    running: list[JSONObject]
    recent: list[JSONObject]
    failures_by_class: dict[str, int]
    failures: list[FailureJSON]
    stop_reason: str | None
    error: str | None
    finalists: list[JSONObject]
    objective: list[JSONObject] | None
    job: JobJSON | None
    next_steps: list[str]


class SweepSummaryJSON(TypedDict):
    name: str
    state: str
    status: str | None
    trials: int
    best_value: float | None
    created_at: str | None
    updated_at: str | None
    job: str | None
    queue_position: int | None


class SweepListJSON(TypedDict):
    """SweepList: GET /v1/sweeps."""

    sweeps: list[SweepSummaryJSON]


class WinnerJSON(TypedDict, total=False):
    """winner.json: the keys the CLI reads (the file has more: autotune/report/writer.py)."""

    sweep: str
    simulated: bool
    notes: list[str]


class RemoteError(AutotuneError):
    """The service answered with an error (or could not be reached: status None)."""

    def __init__(self, message: str, *, status: int | None, field: str | None = None):
        self.status = status
        self.field = field
        if status is None:
            self.exit_code = 1
        elif status == 404:
            self.exit_code = 6  # as StorageError: no such sweep
        elif 400 <= status < 500:
            self.exit_code = 2  # as UserError
        elif status == 503:
            self.exit_code = 6
        else:
            self.exit_code = 1
        super().__init__(message)


def resolve_token(token: str | None = None) -> str:
    """The token: given, $AUTOTUNE_TOKEN, $AUTOTUNE_TOKEN_FILE, or the local state folder's."""
    from autotune.service.auth import TOKEN_ENV, TOKEN_FILE_ENV, read_token
    from autotune.service.state import default_state_dir

    if token:
        return token
    env = os.environ.get(TOKEN_ENV, "").strip()
    if env:
        return env
    path = os.environ.get(TOKEN_FILE_ENV, "").strip()
    file = Path(path).expanduser() if path else default_state_dir() / "token"
    if not file.exists():
        raise ConfigError(
            f"no service token: set {TOKEN_ENV} (or {TOKEN_FILE_ENV}) to the token in the "
            f"service's state folder; {file} does not exist",
            field="--server",
        )
    return read_token(file)


class ServiceClient:
    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout_s: float = 120.0,
        transport: httpx.BaseTransport | None = None,
    ):
        import httpx

        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {resolve_token(token)}"},
            timeout=timeout_s,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- plumbing ----------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, OverrideValue] | None = None,
        json: JSONValue = None,
    ) -> httpx.Response:
        import httpx

        try:
            r = self._http.request(
                method, path, content=content, headers=headers, params=params, json=json
            )
        except httpx.HTTPError as exc:
            raise RemoteError(
                f"cannot reach the autotune service at {self.base_url}: {exc}", status=None
            ) from exc
        if r.status_code >= 400:
            raise _remote_error(r)
        return r

    def _json(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, OverrideValue] | None = None,
        json: JSONValue = None,
    ) -> Any:
        """The answer's JSON object, typed by the caller (the endpoint's response model)."""
        r = self.request(method, path, content=content, headers=headers, params=params, json=json)
        data = r.json()
        if not isinstance(data, dict):
            raise RemoteError(f"{path}: expected a JSON object from the service", status=None)
        return data

    # -- sweeps ------------------------------------------------------------------------------

    def submit_sweep(self, spec_yaml: str, **overrides: OverrideValue) -> SubmitJSON:
        params = {k: v for k, v in overrides.items() if v is not None}
        result: SubmitJSON = self._json(
            "POST",
            "/v1/sweeps",
            content=spec_yaml.encode(),
            headers={"Content-Type": YAML_TYPE},
            params=params,
        )
        return result

    def list_sweeps(self) -> SweepListJSON:
        result: SweepListJSON = self._json("GET", "/v1/sweeps")
        return result

    def sweep_status(self, name: str) -> SweepStatusJSON:
        result: SweepStatusJSON = self._json("GET", f"/v1/sweeps/{name}")
        return result

    def stop_sweep(self, name: str, *, force: bool = False, wait_s: float = 0) -> SweepStatusJSON:
        result: SweepStatusJSON = self._json(
            "POST", f"/v1/sweeps/{name}/stop", json={"force": force, "wait_s": wait_s}
        )
        return result

    def resume_sweep(self, name: str, **overrides: OverrideValue) -> SubmitJSON:
        body: JSONObject = {k: v for k, v in overrides.items() if v is not None}
        result: SubmitJSON = self._json("POST", f"/v1/sweeps/{name}/resume", json=body)
        return result

    def report_md(self, name: str) -> str:
        return self.request("GET", f"/v1/sweeps/{name}/report").text

    def launch_sh(self, name: str) -> str | None:
        """The launch script, or None while the sweep has no winner."""
        try:
            return self.request("GET", f"/v1/sweeps/{name}/launch.sh").text
        except RemoteError as exc:
            if exc.status == 404 and "no launch.sh" in str(exc):
                return None
            raise

    def winner_json(self, name: str) -> WinnerJSON:
        result: WinnerJSON = self._json("GET", f"/v1/sweeps/{name}/winner.json")
        return result

    def events(self, name: str, *, interval_s: float = 1.0) -> Iterator[tuple[str, Any]]:
        """(event, data) from the sweep's SSE stream until its `end` event."""
        import httpx
        from httpx_sse import SSEError, connect_sse

        timeout = httpx.Timeout(30.0, read=None)  # the stream is quiet between trials
        try:
            with connect_sse(
                self._http,
                "GET",
                f"/v1/sweeps/{name}/events",
                params={"interval_s": interval_s},
                timeout=timeout,
            ) as source:
                if source.response.status_code >= 400:
                    source.response.read()
                    raise _remote_error(source.response)
                for sse in source.iter_sse():
                    yield sse.event, json.loads(sse.data) if sse.data else None
                    if sse.event == "end":
                        return
        except (httpx.HTTPError, SSEError) as exc:
            raise RemoteError(
                f"lost the event stream of sweep {name!r} from {self.base_url}: {exc}",
                status=None,
            ) from exc


def _remote_error(r: httpx.Response) -> RemoteError:
    try:
        body = r.json()
    except ValueError:
        body = {}
    detail = body.get("detail") if isinstance(body, dict) else None
    kind = body.get("error") if isinstance(body, dict) else None
    text = str(detail) if detail else (r.text[:500] or r.reason_phrase)
    if r.status_code == 401:
        text += "; set AUTOTUNE_TOKEN (or AUTOTUNE_TOKEN_FILE) to the service's token"
    prefix = f"service: {kind}: " if kind else "service: "
    field = body.get("field") if isinstance(body, dict) else None
    return RemoteError(f"{prefix}{text} (HTTP {r.status_code})", status=r.status_code, field=field)
