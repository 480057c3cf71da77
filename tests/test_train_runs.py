"""What a ``lengthx train`` run leaves behind (docs/design.md §5): its own directory when its budget or schedule
differs from the profile's, ``metrics.jsonl`` with one line per logged step, the trackers of
``train.log_with``, and the training curves ``lengthx figures`` draws from them."""

from __future__ import annotations

import json
import os

import pytest
from conftest import L_T

from lengthx.cli import main
from lengthx.cli.figures import figures_main
from lengthx.cli.train import compose_train_config
from lengthx.segmented.plan import resolve_run


def _base(models, corpus, tmp_path) -> list[str]:
    """A tiny GPT-2's OOTB run on a small corpus, with no ``train.*`` key given: the profile's run."""
    files = ",".join(f"'{f}'" for f in corpus)
    return ["model=gpt2", f"model.path={models['gpt2']}", f"model.l_tr={L_T}", "method=ootb", "data=files",
            f"data.files=[{files}]", "data.test_percent=30", f"data.cache_dir={tmp_path / 'cache'}", "device=cpu"]


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setattr("lengthx.segmented.plan.RUNS_DIR", tmp_path / "runs")
    monkeypatch.setenv("LENGTHX_RUNS", str(tmp_path / "runs"))  # Hydra's own output directory
    return tmp_path / "runs"


def test_budget_and_schedule_overrides_get_their_own_run_directory(models, corpus, tmp_path, runs):
    base = _base(models, corpus, tmp_path)
    canonical = resolve_run(compose_train_config(base))
    assert canonical.output_dir == runs / "mini" / "gpt2" / "ootb-1x" and canonical.variant == {}
    # a value equal to the profile's is no variant; a progress or checkpoint knob changes nothing trained
    same = resolve_run(compose_train_config([*base, "train.batch_size=8", "train.save_every=7", "train.progress=false"]))
    assert same.output_dir == canonical.output_dir
    smoke = resolve_run(compose_train_config([*base, "train.max_steps=10"]))
    assert smoke.output_dir.parent == canonical.output_dir.parent
    assert smoke.output_dir.name.startswith("ootb-1x~") and smoke.variant == {"train.max_steps": 10}
    assert resolve_run(compose_train_config([*base, "train.max_steps=10"])).output_dir == smoke.output_dir
    others = {resolve_run(compose_train_config([*base, ov])).output_dir.name
              for ov in ("train.max_steps=11", "train.lr=1e-3", "train.budget_fraction=0.5", "seed=3")}
    assert len(others | {smoke.output_dir.name}) == 5 and "ootb-1x" not in others
    explicit = resolve_run(compose_train_config([*base, "train.max_steps=10", f"train.output_dir={tmp_path / 'x'}"]))
    assert explicit.output_dir == tmp_path / "x"


def _snapshot(root):
    return {p.relative_to(root): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_smoke_train_leaves_the_canonical_run_alone_and_logs_its_curve(models, corpus, tmp_path, runs, capsys):
    base = _base(models, corpus, tmp_path)
    canonical = runs / "mini" / "gpt2" / "ootb-1x"
    (canonical / "final").mkdir(parents=True)
    (canonical / "train_config.json").write_text(json.dumps({"config_hash": "the profile's run"}))
    (canonical / "final" / "lengthx_train.json").write_text(json.dumps({"steps": 1234}))
    before = _snapshot(canonical)

    main(["train", *base, "train.max_steps=5", "train.log_every=2", "train.progress=false"])
    assert _snapshot(canonical) == before
    (smoke,) = [p for p in canonical.parent.iterdir() if p.name != "ootb-1x"]
    assert smoke.name.startswith("ootb-1x~") and (smoke / "final" / "lengthx_train.json").is_file()
    rows = [json.loads(line) for line in (smoke / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 5]  # every train.log_every steps, and the last
    assert all(set(r) >= {"step", "loss", "lr", "tokens", "tokens_per_s"} for r in rows)
    assert [r["tokens"] for r in rows] == [2 * 8 * L_T, 4 * 8 * L_T, 5 * 8 * L_T]  # the profile's batch of 8
    assert all(r["tokens_per_s"] > 0 and r["loss"] > 0 for r in rows)
    assert json.loads((smoke / "train_config.json").read_text())["differs_from_profile"] == {"train.max_steps": 5}

    figures_main(["--results-dir", str(tmp_path / "results" / "mini"), "--runs-dir", str(runs / "mini")])
    assert (tmp_path / "results" / "mini" / "figures" / "sb_training_curves.png").stat().st_size > 0
    assert "sb_training_curves.png" in capsys.readouterr().out


def test_an_unknown_or_missing_tracker_stops_before_training(models, corpus, tmp_path, runs, capsys):
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS, get_available_trackers

    base = _base(models, corpus, tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["train", *base, "train.max_steps=2", "train.log_with=tensorbored"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "train.log_with=tensorbored: not an Accelerate tracker" in err and "Traceback" not in err
    missing = sorted(set(LOGGER_TYPE_TO_CLASS) - {str(t) for t in get_available_trackers()})
    if missing:
        with pytest.raises(SystemExit) as exc:
            main(["train", *base, "train.max_steps=2", f"train.log_with={missing[0]}"])
        assert exc.value.code == 2
        assert f"train.log_with={missing[0]}: the tracker's package is not installed" in capsys.readouterr().err
    assert not (runs / "mini").exists()  # nothing trained, nothing written


@pytest.mark.slow
def test_log_with_passes_the_metrics_to_accelerate_trackers(models, corpus, tmp_path, runs):
    from accelerate.tracking import get_available_trackers

    if "tensorboard" not in {str(t) for t in get_available_trackers()}:
        pytest.skip("neither tensorboard nor tensorboardX is installed")
    main(["train", *_base(models, corpus, tmp_path), "train.max_steps=3", "train.log_with=tensorboard",
          "train.progress=false"])
    (run,) = (runs / "mini" / "gpt2").iterdir()
    events = [p for p in run.rglob("events.out.tfevents.*")]
    assert events and sum(p.stat().st_size for p in events) > 0, sorted(os.listdir(run))
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 3


def test_a_run_from_before_metrics_jsonl_keeps_its_curve(tmp_path):
    """Runs trained before metrics.jsonl logged to curve.jsonl: read and drawn the same, and moved to
    metrics.jsonl (cut back to the checkpoint) when such a run resumes."""
    from lengthx.segmented.loop import _truncate_curve
    from lengthx.segmented.metrics import find_runs, read_curve

    run = tmp_path / "mini" / "mini-gpt2" / "ootb-1x"
    run.mkdir(parents=True)
    (run / "curve.jsonl").write_text("".join(json.dumps({"step": s, "loss": 5.0 - s, "lr": 1e-4, "tokens": 8 * s,
                                                         "seconds": s}) + "\n" for s in (1, 2, 3)))
    assert [r["step"] for r in read_curve(run)] == [1, 2, 3] and find_runs(tmp_path) == [run]
    _truncate_curve(run, 2)
    assert not (run / "curve.jsonl").exists()
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
