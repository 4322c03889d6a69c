"""`autotune calibrate` on a llama-server startup log: the engine told by llama.cpp's own lines,
the launch's configuration read back into the llama.cpp planner's fields, the plan made from the
GGUF file the launch loaded, and the memory shifts stored like SGLang's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.calibration.calibrate import calibrate_log, detect_engine, read_launch
from autotune.calibration.llamacpp_log import free_before_weights_gib, logged_config
from autotune.cli import app
from autotune.errors import ConfigError, ModelLoadError
from autotune.hardware import get_gpu
from autotune.planner.dispatch import plan_for
from autotune.store.db import Store
from autotune.testing.gguf_models import SPECS, write_gguf, write_synthetic_vocab
from tests.calibration.llamacpp_log_data import (
    CONFIG,
    FREE_BEFORE_WEIGHTS_MIB,
    KV_POOL_TOKENS,
    LOG,
    MODEL_BUFFERS_MIB,
)

H200 = "h200-141g"
VERSION = "0.3.36"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gguf")
    vocab = write_synthetic_vocab(root / "vocab.gguf", n_vocab=32000)  # the SPM vocab's size
    return write_gguf(SPECS["tiny"], root / "tiny.gguf", vocab=vocab)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "server.log"
    path.write_text(LOG)
    return path


def test_the_log_is_llama_servers_and_records_its_configuration() -> None:
    assert detect_engine(LOG) == "llamacpp"
    assert logged_config(LOG) == CONFIG
    assert free_before_weights_gib(LOG) == round(FREE_BEFORE_WEIGHTS_MIB / 1024, 4)
    # a unified cache: n_ctx is every slot's cells
    unified = LOG.replace("kv_unified            = false", "kv_unified            = true")
    assert logged_config(unified)["kv_unified"] is True
    auto = LOG.replace("flash_attn            = enabled", "flash_attn            = auto")
    assert logged_config(auto)["flash_attn"] == "auto"
    assert free_before_weights_gib("load_tensors: CPU model buffer size = 1.00 MiB\n") is None


def test_read_launch_has_no_tensor_parallelism_nor_version(log: Path) -> None:
    launch = read_launch(log)
    assert (launch.engine, launch.tp, launch.version) == ("llamacpp", 1, None)


def test_a_log_gives_the_machines_free_memory_and_weights(log: Path, tiny: Path) -> None:
    c = calibrate_log(log, model=str(tiny), gpu=H200, version=VERSION)
    plan = plan_for("llamacpp", str(tiny), get_gpu(H200), CONFIG, version=VERSION)
    assert (c.engine, c.engine_version, c.gpu, c.tp) == ("llamacpp", VERSION, H200, 1)
    assert c.predicted_kv == plan.kv_pool_tokens == c.logged_kv == KV_POOL_TOKENS
    assert c.cell_bytes == plan.kv_cell_bytes
    assert c.free_shift_gib == pytest.approx(
        FREE_BEFORE_WEIGHTS_MIB / 1024 - plan.pre_weights_free_gib, abs=1e-3
    )
    # every model buffer, host and device, on both sides (the log prints two decimals)
    assert c.weights_shift_gib == pytest.approx(
        MODEL_BUFFERS_MIB / 1024 - plan.weights_gib, abs=1e-4
    )
    assert abs(c.weights_shift_gib or 0.0) < 0.01 / 1024
    assert c.kv_memory_shift_gib is None  # llama.cpp's cache is sized by the context


def test_a_cpu_run_has_no_free_device_memory(log: Path, tiny: Path) -> None:
    c = calibrate_log(log, model=str(tiny), gpu="cpu", version=VERSION)
    assert c.gpu == "cpu" and c.free_shift_gib is None and c.weights_shift_gib is not None


def test_what_calibrate_cannot_do_is_said(log: Path, tiny: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="build number.*--engine-version"):
        calibrate_log(log, model=str(tiny), gpu=H200)
    with pytest.raises(ModelLoadError, match="GGUF"):
        calibrate_log(log, model=str(tmp_path / "missing.gguf"), gpu=H200, version=VERSION)
    loading = tmp_path / "loading.log"
    loading.write_text(LOG.split("0.00.556.493")[0])  # killed before the context was made
    with pytest.raises(ConfigError, match="llama_kv_cache"):
        calibrate_log(loading, model=str(tiny), gpu=H200, version=VERSION)


def test_cli_dry_run_json_stores_nothing(log: Path, tiny: Path, tmp_path: Path) -> None:
    db = tmp_path / "cal.db"
    argv = ["calibrate", str(log), "--model", str(tiny), "--gpu", H200,
            "--engine-version", VERSION, "--db", str(db)]  # fmt: skip
    res = CliRunner().invoke(app, [*argv, "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.stdout)
    assert row["engine"] == "llamacpp" and row["logged_kv"] == KV_POOL_TOKENS
    assert row["kv_ratio"] == 1.0 and row["free_shift_gib"] is not None
    if db.exists():
        with Store(path=db) as store:
            assert store.get_calibrations(engine="llamacpp", gpu=H200, model=str(tiny)) == []


def test_cli_stores_once_per_log(log: Path, tiny: Path, tmp_path: Path) -> None:
    db = tmp_path / "cal.db"
    argv = ["calibrate", str(log), "--model", str(tiny), "--gpu", H200,
            "--engine-version", VERSION, "--db", str(db)]  # fmt: skip
    for _ in range(2):  # the same log twice: one row
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 0, res.output
    assert "llamacpp 0.3.36" in res.stdout and "stored 1 calibration" in res.stdout
    with Store(path=db) as store:
        rows = store.get_calibrations(engine="llamacpp", gpu=H200, model=str(tiny))
    assert len(rows) == 1 and rows[0].logged_kv == KV_POOL_TOKENS


def test_cli_without_engine_version_names_it(log: Path, tiny: Path, tmp_path: Path) -> None:
    argv = ["calibrate", str(log), "--model", str(tiny), "--gpu", H200,
            "--db", str(tmp_path / "cal.db"), "--json"]  # fmt: skip
    res = CliRunner().invoke(app, argv)
    err = res.exception  # `autotune`'s entry point prints it and exits with its code
    assert isinstance(err, ConfigError) and err.field == "--engine-version"
    assert "--engine-version" in str(err) and "build number" in str(err)
