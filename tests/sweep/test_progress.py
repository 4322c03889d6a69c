from __future__ import annotations

from autotune.sweep.progress import SweepProgress, eta_seconds, fmt_duration, fmt_value


def test_eta_is_the_earlier_of_pace_and_deadline() -> None:
    assert eta_seconds(done=10, total=40, elapsed_s=100, deadline_s=None) == 300
    assert eta_seconds(done=10, total=40, elapsed_s=100, deadline_s=60) == 60
    assert eta_seconds(done=0, total=40, elapsed_s=5, deadline_s=None) is None
    assert eta_seconds(done=3, total=None, elapsed_s=5, deadline_s=None) is None


def test_formatting() -> None:
    assert fmt_duration(3725) == "1:02:05" and fmt_duration(65) == "1:05"
    assert fmt_duration(None) == "?"
    assert fmt_value(None) == "-" and fmt_value(1234.56) == "1,234.6"


def test_disabled_progress_is_silent(capsys) -> None:  # type: ignore[no-untyped-def]
    with SweepProgress("x", enabled=False) as bar:
        bar.update(done=1, total=2, best=3.0, running=1, deadline_s=None)
        bar.note("hello")
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_enabled_progress_prints_notes_to_stderr(capsys) -> None:  # type: ignore[no-untyped-def]
    with SweepProgress("x", enabled=True) as bar:
        bar.update(done=1, total=2, best=3.0, running=1, deadline_s=None)
        bar.note("#1 complete: 3.0")
    out = capsys.readouterr()
    assert out.out == "" and "#1 complete: 3.0" in out.err
