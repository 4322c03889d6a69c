"""`autotune mcp` through the mcp package's own stdio client: the tools are listed with typed
schemas; plan and inspect answer synchronously; a simulated sweep is started, followed,
stopped, resumed and reported; kernel tuning runs as a job (and, without a GPU here, fails
with a message that says so); errors come back as tool errors an agent can read."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.inspect.packs import write_llama_pack
from tests.service.conftest import ROOT, tiny_yaml

pytestmark = pytest.mark.anyio

TOOLS = {
    "plan",
    "inspect_checkpoint",
    "start_sweep",
    "sweep_status",
    "stop_sweep",
    "get_report",
    "tune_kernels",
    "install_kernels",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _params(state: Path) -> Any:
    from mcp import StdioServerParameters

    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    return StdioServerParameters(
        command=sys.executable,
        args=[
            "-c",
            "from autotune.cli import main; main()",
            "mcp",
            "--state-dir",
            str(state),
            "--db",
            str(state / "autotune.db"),
        ],
        env=env,
        cwd=str(ROOT),
    )


async def call(client: Any, tool: str, **args: Any) -> dict[str, Any]:
    res = await client.call_tool(tool, args)
    assert not res.is_error, (tool, res.content)
    assert isinstance(res.structured_content, dict), res
    return res.structured_content


async def call_error(client: Any, tool: str, **args: Any) -> str:
    res = await client.call_tool(tool, args)
    assert res.is_error, (tool, res.structured_content)
    return " ".join(getattr(c, "text", "") for c in res.content)


async def poll(client: Any, tool: str, pred: Any, timeout: float, **args: Any) -> dict[str, Any]:
    import anyio

    deadline = time.monotonic() + timeout
    while True:
        out = await call(client, tool, **args)
        if pred(out):
            return out
        if time.monotonic() > deadline:
            raise AssertionError(f"{tool} never satisfied the condition: {out}")
        await anyio.sleep(0.3)


async def test_tools_over_stdio(state: Path) -> None:
    from mcp import Client

    models = state.parent / "models"
    pack = write_llama_pack(models / "llama").path
    async with Client(_params(state), read_timeout_seconds=120) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert TOOLS <= set(tools)
        start = tools["start_sweep"]
        assert start.input_schema["required"] == ["spec_yaml"]
        assert start.output_schema is not None and "job" in start.output_schema["properties"]
        assert tools["plan"].output_schema["properties"]["fits"]["type"] == "boolean"

        plan = await call(
            client,
            "plan",
            model="qwen3.8-27b-awq-int4",
            gpu="rtx-4080-super-32g",
            config={"mem_fraction_static": 0.92, "max_mamba_cache_size": 6},
        )
        assert plan["fits"] is True and plan["mamba_slots"] == 6
        msg = await call_error(client, "plan", model="qwen3.8-27b-awq-int4", gpu="rtx-9999")
        assert "unknown GPU" in msg

        report = await call(client, "inspect_checkpoint", path=str(pack))
        assert report["exit_code"] == 0 and report["report"]["architecture"]
        msg = await call_error(client, "inspect_checkpoint", path="/etc")
        assert "Forbidden" in msg and "outside" in msg

        sub = await call(
            client, "start_sweep", spec_yaml=tiny_yaml("mcp1", **{"budget.max_trials": 8})
        )
        assert sub["name"] == "mcp1" and sub["state"] == "starting"
        await poll(
            client,
            "sweep_status",
            lambda s: s["counts"].get("complete", 0) >= 1,
            90,
            name="mcp1",
        )
        stopped = await call(client, "stop_sweep", name="mcp1", wait_s=60)
        assert stopped["state"] == "stopped" and stopped["job"]["state"] == "exited"
        msg = await call_error(client, "stop_sweep", name="mcp1")
        assert "no running job" in msg

        launched = stopped["progress"]["launched"]
        resumed = await call(client, "resume_sweep", name="mcp1", max_trials=launched + 1)
        assert resumed["job"]["runs"] == 2
        final = await poll(
            client,
            "sweep_status",
            lambda s: s["state"] == "finished" and s["job"]["state"] == "exited",
            90,
            name="mcp1",
        )
        assert final["progress"]["launched"] == launched + 1
        rep = await call(client, "get_report", name="mcp1")
        assert rep["report_md"].startswith("# autotune report: mcp1")
        assert rep["launch_sh"].startswith("#!/usr/bin/env bash")
        assert rep["winner"]["winner"]["trial"] == final["best"]["number"]
        listed = await call(client, "list_sweeps")
        assert [s["name"] for s in listed["sweeps"]] == ["mcp1"]

        try:
            import torch

            has_gpu = torch.cuda.is_available()
        except ImportError:
            has_gpu = False
        if has_gpu:
            kern = await call(
                client, "tune_kernels", name="k1", nk=["4096,4096"], batch_sizes="16"
            )
            assert kern["state"] in ("running", "finished")
            done = await poll(
                client, "kernels_status", lambda s: s["state"] != "running", 120, name="k1"
            )
            assert done["state"] == "finished" and done["files"], done
            msg = await call_error(client, "install_kernels", name="k1")
            assert "Conflict" in msg and "autotune's own kernels" in msg
        else:  # a job that can only fail is refused, not accepted to fail later
            msg = await call_error(
                client, "tune_kernels", name="k1", nk=["4096,4096"], batch_sizes="16"
            )
            assert "NVIDIA GPU" in msg and "service's host" in msg, msg
            msg = await call_error(client, "kernels_status", name="k1")
            assert "no kernel tuning job 'k1'" in msg
        msg = await call_error(client, "tune_kernels", name="k2", model="/etc")
        assert "outside" in msg
        msg = await call_error(
            client, "tune_kernels", name="k3", nk=["4096,4096"], engine="sglang", kind="int4"
        )
        assert "invalid arguments" in msg and "int4" in msg


async def test_every_tool_refuses_an_argument_it_lacks(tmp_path: Path) -> None:
    # a typo (max_trial, engine_verison) must not be dropped silently: the sweep would run
    # with the spec's budget, the plan with the default release
    from mcp.server.mcpserver.exceptions import ToolError

    from autotune.service.core import Service
    from autotune.service.mcp_server import build_server
    from tests.service.conftest import write_config

    write_config(tmp_path / "state")
    service = Service.open(tmp_path / "state", str(tmp_path / "state" / "autotune.db"))
    try:
        server = build_server(service)
        tools = await server.list_tools()
        assert {t.name for t in tools} >= TOOLS
        assert all(t.input_schema.get("additionalProperties") is False for t in tools)
        # the bounds the service enforces, published (the HTTP request model's own)
        start = next(t for t in tools if t.name == "start_sweep").input_schema["properties"]
        assert start["until"]["anyOf"][0]["pattern"] and "executor" in start
        assert start["max_trials"]["anyOf"][0]["maximum"] == 100_000
        tune = next(t for t in tools if t.name == "tune_kernels").input_schema["properties"]
        assert tune["nk"]["anyOf"][0]["items"]["pattern"] == r"^\d{1,6},\d{1,6}$"
        assert tune["batch_sizes"]["anyOf"][0]["pattern"].startswith(r"^\d{1,6}")
        assert tune["engine_version"]["anyOf"][0]["pattern"]
        assert tune["tp"]["anyOf"][0]["items"]["maximum"] == 64
        args = {"model": "qwen3.8-27b-awq-int4", "gpu": "rtx-4080-super-32g"}
        with pytest.raises(
            ToolError, match=r"unknown argument 'engine_verison'.*'engine_version'"
        ):
            await server.call_tool("plan", {**args, "engine_verison": "0.5.9"})
        with pytest.raises(ToolError, match=r"unknown argument 'max_trial'.*'max_trials'"):
            await server.call_tool("start_sweep", {"spec_yaml": tiny_yaml("x"), "max_trial": 40})
        assert service.list_sweeps().sweeps == []  # nothing was started
        await server.call_tool("plan", args)  # the right arguments still pass
    finally:
        service.shutdown()
