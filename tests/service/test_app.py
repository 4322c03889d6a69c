"""The HTTP service as a real process: submit a simulated sweep, follow it (SSE and polling),
stop it, resume it, fetch its report; a restarted service adopts running jobs and resumes the
sweeps whose job died; requests without the token, oversized or malformed are refused."""

from __future__ import annotations

import json
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from httpx_sse import connect_sse

from tests.service.conftest import (
    Served,
    procs_of,
    start_service,
    stop_jobs,
    stop_service,
    tiny_yaml,
    wait_for,
    write_config,
)

YAML = {"Content-Type": "application/yaml"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("svc")
    state = root / "state"
    (root / "models").mkdir()
    write_config(state, allowed_paths=[str(root / "models")])
    s = start_service(state)
    try:
        yield s
    finally:
        stop_service(s)
        stop_jobs(state)
        assert procs_of(state) == [], "jobs or engines outlived the tests"


def events(c: httpx.Client, name: str, stop: Any) -> list[tuple[str, dict[str, Any]]]:
    """SSE events of sweep `name` until `stop(event, data)` is true or the stream ends."""
    out: list[tuple[str, dict[str, Any]]] = []
    timeout = httpx.Timeout(10.0, read=90.0)
    with connect_sse(
        c, "GET", f"/v1/sweeps/{name}/events", params={"interval_s": 0.2}, timeout=timeout
    ) as es:
        assert es.response.status_code == 200
        assert es.response.headers["content-type"].startswith("text/event-stream")
        for sse in es.iter_sse():
            data = json.loads(sse.data)
            out.append((sse.event, data))
            if stop(sse.event, data) or sse.event == "end":
                break
    return out


def test_token_is_created_owner_only_and_required(served: Served) -> None:
    mode = stat.S_IMODE((served.state / "token").stat().st_mode)
    assert mode == 0o600
    assert len(served.token) >= 32
    assert httpx.get(f"{served.url}/healthz").json()["ok"] is True  # the one public endpoint
    for path in ("/v1/sweeps", "/openapi.json", "/docs", "/v1/sweeps/x/report"):
        r = httpx.get(f"{served.url}{path}")
        assert r.status_code == 401, path
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert "missing bearer token" in r.json()["detail"]
    bad = {"Authorization": "Bearer " + "x" * len(served.token)}
    r = httpx.post(f"{served.url}/v1/sweeps", headers={**bad, **YAML}, content=b"name: x")
    assert r.status_code == 401 and r.json()["detail"] == "invalid bearer token"
    r = httpx.get(f"{served.url}/v1/sweeps", headers={"Authorization": f"Basic {served.token}"})
    assert r.status_code == 401
    with served.client() as c:
        assert c.get("/openapi.json").json()["info"]["title"] == "autotune"


def test_submit_follow_stop_resume_report(served: Served) -> None:
    with served.client() as c:
        r = c.post(
            "/v1/sweeps", content=tiny_yaml("http1", **{"budget.max_trials": 8}), headers=YAML
        )
        assert r.status_code == 202, r.text
        sub = r.json()
        assert sub["name"] == "http1" and sub["state"] == "starting"
        assert sub["links"]["events"] == "/v1/sweeps/http1/events"
        again = c.post("/v1/sweeps", content=tiny_yaml("http1"), headers=YAML)
        assert again.status_code == 409  # the job holds the name (its sweep row may not exist yet)

        # until the first best: a trial's row is complete a moment before the sweep names it
        # the best (the Optuna tell comes between), so a status read in that moment has none
        seen = events(c, "http1", lambda e, d: e == "best")
        kinds = [e for e, _ in seen]
        assert kinds[0] == "status" and "trial" in kinds
        assert any(e == "trial" and d["status"] == "complete" for e, d in seen)
        assert seen[-1][1]["value"] > 0

        polled = c.get("/v1/sweeps/http1").json()
        assert polled["state"] == "running" and polled["progress"]["max_trials"] == 8
        assert polled["best"]["value"] > 0 and polled["simulated"] is True

        stopped = c.post("/v1/sweeps/http1/stop", json={"wait_s": 60}).json()
        assert stopped["state"] == "stopped", stopped
        assert stopped["job"]["state"] == "exited"
        assert stopped["job"]["exit_code"] == 128 + signal.SIGTERM  # the sweep's own exit status
        assert stopped["job"]["stop_requested"] == "SIGTERM"
        assert "SIGTERM" in stopped["stop_reason"]
        assert stopped["counts"].get("complete", 0) >= 1
        assert "running" not in stopped["counts"]
        assert any("resume" in s for s in stopped["next_steps"])
        r = c.post("/v1/sweeps/http1/stop")
        assert r.status_code == 409 and "no running job" in r.json()["detail"]

        launched = stopped["progress"]["launched"]
        r = c.post("/v1/sweeps/http1/resume", json={"max_trials": launched + 1})
        assert r.status_code == 202, r.text
        assert r.json()["job"]["runs"] == 2
        tail = events(c, "http1", lambda e, d: False)
        end = tail[-1]
        assert end[0] == "end", tail[-3:]
        final = end[1]
        assert final["state"] == "finished", final
        assert final["progress"]["launched"] == launched + 1
        done = wait_for(
            lambda: (s := c.get("/v1/sweeps/http1").json())["job"]["state"] == "exited" and s,
            30,
            "the resumed job to exit",
        )
        assert done["job"]["exit_code"] == 0

        md = c.get("/v1/sweeps/http1/report")
        assert md.status_code == 200 and md.headers["content-type"].startswith("text/markdown")
        assert md.text.startswith("# autotune report: http1") and "SIMULATED" in md.text
        sh = c.get("/v1/sweeps/http1/launch.sh")
        assert sh.status_code == 200 and sh.text.startswith("#!/usr/bin/env bash")
        assert "sglang" in sh.text
        winner = c.get("/v1/sweeps/http1/winner.json").json()
        assert winner["schema"] == "autotune.winner/1" and winner["sweep"] == "http1"
        assert winner["winner"]["trial"] == done["best"]["number"]
        assert winner["winner"]["value"] == pytest.approx(done["best"]["value"])

        listed = {s["name"]: s for s in c.get("/v1/sweeps").json()["sweeps"]}
        assert listed["http1"]["state"] == "finished" and listed["http1"]["trials"] >= 3


def test_refused_requests(served: Served) -> None:
    models = served.state.parent / "models"
    with served.client() as c:
        r = c.post("/v1/sweeps", content=b"x" * (1024 * 1024 + 1), headers=YAML)
        assert r.status_code == 413 and "larger than" in r.json()["detail"]
        r = c.post("/v1/sweeps", content=b"name: [unclosed", headers=YAML)
        assert r.status_code == 422 and "not valid YAML" in r.json()["detail"]
        r = c.post("/v1/sweeps", content=b"{broken", headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and "not valid JSON" in r.json()["detail"]
        r = c.post("/v1/sweeps", content=b"name: x", headers={"Content-Type": "image/png"})
        assert r.status_code == 415
        r = c.post("/v1/sweeps", json={"spec": {"name": "x"}, "spec_yaml": "name: x"})
        assert r.status_code == 422 and "exactly one" in r.json()["detail"]
        r = c.post(
            "/v1/sweeps", content=tiny_yaml("bad1", **{"target.gpu": "rtx-9999"}), headers=YAML
        )
        assert r.status_code == 422 and "unknown GPU" in r.json()["detail"]
        r = c.post(
            "/v1/sweeps", content=tiny_yaml("bad2", **{"budget.max_trialz": 3}), headers=YAML
        )
        body = r.json()
        assert r.status_code == 422 and body["field"] == "budget.max_trialz"
        assert "did you mean 'max_trials'" in body["detail"]

        # What a spec may name: no binaries, no loader variables, files only under the roots.
        refused = {
            "engine.launcher": ["/bin/sh", "-c", "touch /tmp/pwned"],
            "engine.env": {"LD_PRELOAD": "/tmp/evil.so"},
            "target.model_path": "/etc",
            "space.fixed": {"chat_template": "/etc/passwd"},
            "engine.host": "0.0.0.0",
        }
        for field, value in refused.items():
            r = c.post("/v1/sweeps", content=tiny_yaml("bad3", **{field: value}), headers=YAML)
            body = r.json()
            assert r.status_code == 403, (field, body)
            assert body["error"] == "Forbidden" and body["field"].startswith(field), body
        inside = models / "m1"
        inside.mkdir()
        r = c.post(
            "/v1/sweeps",
            content=tiny_yaml("bad4", **{"space.file": str(inside / "x.yaml")}),
            headers=YAML,
        )
        assert r.status_code == 422 and "x.yaml" in r.json()["detail"]  # allowed, but missing
        assert c.get("/v1/sweeps/bad3").status_code == 404

        r = c.get("/v1/sweeps/nosuch")
        assert r.status_code == 404 and "no sweep 'nosuch'" in r.json()["detail"]
        r = c.post("/v1/plan", json={"model": "qwen3.8-27b-awq-int4"})
        assert r.status_code == 422 and r.json()["field"] == "gpu"
        r = c.post(
            "/v1/plan",
            json={
                "model": "qwen3.8-27b-awq-int4",
                "gpu": "rtx-4080-super-32g",
                "config": {"mem_fraction_static": 0.92, "max_mamba_cache_size": 6},
            },
        )
        assert r.status_code == 200 and r.json()["fits"] is True
        assert r.json()["mamba_slots"] == 6
        r = c.post("/v1/inspect", json={"path": "/etc"})
        assert r.status_code == 403 and "outside" in r.json()["detail"]


def test_restart_adopts_running_jobs_and_resumes_dead_ones(state: Path) -> None:
    a = start_service(state)
    services = [a]
    try:
        with a.client() as c:
            r = c.post(
                "/v1/sweeps",
                content=tiny_yaml("restart1", **{"budget.max_trials": 4}),
                headers=YAML,
            )
            assert r.status_code == 202, r.text
            wait_for(
                lambda: c.get("/v1/sweeps/restart1").json()["progress"]["running"] > 0,
                60,
                "a running trial",
            )
            pid = c.get("/v1/sweeps/restart1").json()["job"]["pid"]
        stop_service(a, sig=signal.SIGKILL)
        assert psutil.Process(pid).is_running(), "the job outlives the service"

        b = start_service(state)  # adopts the live job, does not start another
        services.append(b)
        with b.client() as c:
            st = c.get("/v1/sweeps/restart1").json()
            assert st["job"]["pid"] == pid and st["job"]["runs"] == 1
            assert st["state"] in ("running", "finished")
            # A crash of the whole machine: service and job die at once.
            stop_service(b, sig=signal.SIGKILL)
            if st["state"] == "running":
                os.killpg(pid, signal.SIGKILL)
                wait_for(
                    lambda: (
                        not psutil.pid_exists(pid)
                        or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
                    ),
                    10,
                    "the job to die",
                )

        c3 = start_service(state)
        services.append(c3)
        with c3.client() as c:
            st = c.get("/v1/sweeps/restart1").json()
            if st["job"]["runs"] == 1:  # the sweep had finished before the crash: nothing to do
                assert st["state"] == "finished"
                pytest.skip("the sweep finished before the simulated crash")
            assert st["job"]["started_by"] == "recovery" and st["job"]["runs"] == 2
            assert st["job"]["pid"] != pid
            final = wait_for(
                lambda: (s := c.get("/v1/sweeps/restart1").json())["state"] == "finished" and s,
                90,
                "the resumed sweep to finish",
            )
            assert final["progress"]["launched"] == 4  # the budget spans both runs
    finally:
        for s in services:
            if s.proc.poll() is None:
                stop_service(s)
