"""Cell hashes without the checkout's path (docs/design.md §7): the same checkpoint anywhere is the same cell,
a changed one is not, and a cell the current code does not reproduce (another prompt) is not done and is named
stale."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf, open_dict

from lengthx.config import CONF_DIR, PACKAGE_DIR
from lengthx.core.cells import cell_hash, planned_cells
from lengthx.core.runner import Runner
from lengthx.core.store import ResultsStore
from lengthx.models.loading import model_fingerprint
from lengthx.models.minis import compose_run

ROOT = Path(__file__).resolve().parents[1]
MINI_T5_LM = PACKAGE_DIR / "checkpoints" / "mini-t5-lm"
# a job of the Makefile's reproduce-mini whose cells results/mini holds (Table 3, P_max row)
TABLE3_PMAX = ["model=mini-t5-lm", "task=lm", "method=pmax", "task.num_examples=100", "calibration.num_examples=4"]


# cell hashes of a task's own settings, as results/ holds them: hashes of the whole weights and the task's
# behaviour, without the example count (pinned: results depend on them; the checkpoint's and the behaviour's
# fingerprints fixed as "w" and "b")
PINNED = {
    "mini": {"mini-t5|none|passkey|20k": (2702, "8534e8451a1b"), "mini-t5|none|passkey|55k": (7432, "fa3cf693a189")},
    "paper": {"mini-t5|none|passkey|20k": (20000, "33ebce13e4fd"), "mini-t5|none|passkey|55k": (55000, "6b36abb90ad5")},
}


def pinned_config(profile: str) -> DictConfig:
    """The fixed config of the pinned hashes (neither conf/ nor the checkout's location enters them)."""
    return OmegaConf.create({
        "model": {"name": "mini-t5", "path": "/checkout/lengthx/checkpoints/mini-t5", "family": "t5", "l_tr": 256},
        "method": {"name": "none", "scope": "encoder"},
        "task": {"name": "passkey", "paper": "A", "table": "4", "seed": 0, "num_examples": None, "settings": None,
                 "only": None, "unit": "tokens", "labels": ["20k", "55k"], "paper_unit": "chars",
                 "paper_settings": [20000, 55000], "paper_l_tr": 512, "paper_l_ex": [5405, 14865]},
        "profile": {"name": profile}, "dtype": "auto", "calibration": {"num_examples": 2},
    })


@pytest.mark.parametrize("profile", list(PINNED))
def test_default_settings_keep_their_cell_keys_and_hashes(profile):
    """Committed cells stay done: a task's own settings keep the keys and hashes results/ holds (a fixed config
    here, so that conf/ does not enter the hash), wherever the checkout lies."""
    cfg = pinned_config(profile)
    got = {c.key: (c.setting.value, cell_hash(cfg, c.setting, "w", "b")) for c in planned_cells(cfg)}
    assert got == PINNED[profile]
    with open_dict(cfg):
        cfg.model.path = "/another/clone/lengthx/checkpoints/mini-t5"
        cfg.model.description = "prose that labels the model"
        cfg.task.num_examples = 4  # a cell is the first n of one sequence: its count is not part of it
    assert {c.key: (c.setting.value, cell_hash(cfg, c.setting, "w", "b")) for c in planned_cells(cfg)} \
        == PINNED[profile]


def _moved(tmp_path: Path, name: str = "elsewhere") -> Path:
    """A copy of mini-t5-lm's checkpoint at another absolute path."""
    return Path(shutil.copytree(MINI_T5_LM, tmp_path / name / "lengthx" / "checkpoints" / "mini-t5-lm"))


def _hashes(overrides: list[str], path: Path | None = None) -> dict[str, str]:
    cfg = compose_run(overrides)
    if path is not None:
        with open_dict(cfg):
            cfg.model.path = str(path)
    return {c.key: cell_hash(cfg, c.setting) for c in planned_cells(cfg)}


def test_a_checkpoint_at_another_path_keeps_its_cell_hashes(tmp_path):
    moved = _moved(tmp_path)
    assert model_fingerprint(str(moved)) == model_fingerprint(str(MINI_T5_LM)) != ""
    assert _hashes(TABLE3_PMAX, moved) == _hashes(TABLE3_PMAX)


def test_the_checkpoint_content_still_decides_the_hash(tmp_path):
    """The path left the hash, the content did not: another config.json (T5's bucket distance) or tokenizer is
    another cell; a re-save that only changes who saved it is not."""
    base = _hashes(TABLE3_PMAX)
    moved = _moved(tmp_path)
    cfg_file = moved / "config.json"
    config = json.loads(cfg_file.read_text())
    cfg_file.write_text(json.dumps({**config, "transformers_version": "9.9.9", "_name_or_path": str(moved)}))
    assert _hashes(TABLE3_PMAX, moved) == base
    cfg_file.write_text(json.dumps({**config, "relative_attention_max_distance": 2 * config["relative_attention_max_distance"]}))
    changed = _hashes(TABLE3_PMAX, moved)
    assert set(changed) == set(base) and not set(changed.values()) & set(base.values())
    cfg_file.write_text(json.dumps(config))
    tok_file = moved / "tokenizer.json"
    tokenizer = json.loads(tok_file.read_text())
    vocab = tokenizer["model"]["vocab"]  # Unigram: [piece, score]; two pieces trade places
    vocab[10], vocab[11] = vocab[11], vocab[10]
    tok_file.write_text(json.dumps(tokenizer))
    assert not set(_hashes(TABLE3_PMAX, moved).values()) & set(base.values())


def test_paths_inside_the_checkout_enter_by_their_place_in_it(monkeypatch):
    """Data shipped with the repository (``${lengthx_repo:…}``, ``${lengthx_pkg:…}``) hashes the same from every
    clone; a path outside the checkout is the user's own data and enters as given."""
    import lengthx.config
    import lengthx.core.cells as cells

    cfg = compose_run(TABLE3_PMAX)
    setting = planned_cells(cfg)[0].setting
    hashes = []
    for root in ("/clone/a", "/elsewhere/b"):
        monkeypatch.setattr(lengthx.config, "CHECKOUT_DIR", Path(root))
        with open_dict(cfg):
            cfg.task.text_path = f"{root}/corpora/prose.txt"
        hashes.append(cells.config_hash(cfg, setting))
    assert hashes[0] == hashes[1]
    with open_dict(cfg):
        cfg.task.text_path = "/data/corpora/prose.txt"  # the same file name, outside the checkout
    assert cells.config_hash(cfg, setting) != hashes[0]


def test_a_training_run_hashes_the_same_from_every_clone(monkeypatch):
    """Paper B's run identity (the config hash in runs/…/train_config.json and the export's meta): the shipped
    mini it starts from and the prose archive enter by their place in the checkout, not by where it lies."""
    import lengthx.config
    from lengthx.cli.train import compose_train_config
    from lengthx.segmented.plan import resolve_run

    hashes = []
    for root in ("/clone/a", "/elsewhere/b"):
        monkeypatch.setattr(lengthx.config, "CHECKOUT_DIR", Path(root))
        cfg = compose_train_config(["model=gpt2", "method=chunk-0.25", "start=pretrained"])
        with open_dict(cfg):
            cfg.model.path = f"{root}/lengthx/checkpoints/mini-gpt2"
            cfg.data.archive = f"{root}/corpora/debian-prose.tar.xz"
        hashes.append(resolve_run(cfg).config_hash)
    assert hashes[0] == hashes[1]
    with open_dict(cfg):
        cfg.model.path = "/my/own/mini-gpt2"  # the user's checkpoint outside the checkout enters as given
    assert resolve_run(cfg).config_hash != hashes[0]


def test_the_calibration_cache_key_holds_no_path(tmp_path):
    cell = planned_cells(compose_run(TABLE3_PMAX))[0]
    here = Runner(compose_run(TABLE3_PMAX)).calibration_path(cell)
    cfg = compose_run(TABLE3_PMAX)
    with open_dict(cfg):
        cfg.model.path = str(_moved(tmp_path))
    there = Runner(cfg).calibration_path(cell)
    assert here[0].name == there[0].name and here[1] == there[1]
    assert "path" not in here[1]["model"] and str(PACKAGE_DIR) not in json.dumps(here[1])


def test_the_committed_cells_are_done_for_a_checkpoint_elsewhere(tmp_path):
    """results/mini as committed: its Table 3 P_max cells are done for mini-t5-lm copied to another path, and
    their Algorithm 1 τ comes from the committed cache."""
    cfg = compose_run([*TABLE3_PMAX, f"results_dir={ROOT / 'results' / 'mini'}"])
    with open_dict(cfg):
        cfg.model.path = str(_moved(tmp_path))
    runner = Runner(cfg)
    cells = runner.cells()
    assert len(cells) == 5 and all(runner.is_done(cell, chash) for cell, chash in cells)
    for cell, _ in cells:
        path, _ = runner.calibration_path(cell)
        assert path.is_file(), path


LM_PMAX = ["model=mini-t5-lm", "task=lm", "method=pmax", "task.num_examples=2", "calibration.num_examples=1"]


def test_a_cell_the_current_code_does_not_reproduce_stays_stale(tmp_path, monkeypatch):
    """Two cells of one job in a store: one written by the current code, one by code that built another prompt
    for its first example. The hash holds the task's behaviour, so that cell is not done (its next run recomputes
    it) and the currency check names it stale under its stored hash; the other cell is done and current."""
    from lengthx.core.currency import check_currency
    from lengthx.core.store.sources import record_sources
    from lengthx.tasks.lm import LMTask

    results = tmp_path / "results"
    overrides = [*LM_PMAX, f"results_dir={results}"]
    cfg = compose_run(overrides)
    runner, store = Runner(cfg), ResultsStore(results)
    done_cell, stale_cell = planned_cells(cfg)[:2]  # the two shortest settings: the hashes build their prompts
    done_hash, now = runner.cell_hash(done_cell.setting), runner.cell_hash(stale_cell.setting)
    examples = LMTask.examples

    def another_prompt(self, *args, **kwargs):
        first, *rest = examples(self, *args, **kwargs)
        return [replace(first, prompt=first.prompt + " (as an older version built it)"), *rest]

    with monkeypatch.context() as patched:
        patched.setattr(LMTask, "examples", another_prompt)
        old = cell_hash(cfg, stale_cell.setting)
    assert old != now
    for cell, chash in ((done_cell, done_hash), (stale_cell, old)):
        rows = [{"paper": "A", "model": cell.model, "method": cell.method, "task": cell.task,
                 "setting": cell.setting.label, "metric": m, "value": v, "n": 2, "status": "ok", "cell": cell.key,
                 "config_hash": chash, "timestamp": "2026-01-01T00:00:00", "L_tr": cfg.model.l_tr, "seed": 0}
                for m, v in zip(runner.cell_metrics, (12.5, 2.5, 0.9, 0.1), strict=False)]
        assert store.append_rows(rows, cell.key, chash)
        assert record_sources(store, [(cell.key, chash)], overrides) == 1
    assert runner.is_done(done_cell, done_hash)
    assert not runner.is_done(stale_cell, now)  # a run computes the current hash: the cell is not done
    df = store.read()
    assert set(df[df["cell"] == stale_cell.key]["config_hash"]) == {old}
    verdict = check_currency(results, df)
    assert verdict.current == [done_cell.key] and not verdict.unverifiable
    assert list(verdict.stale) == [stale_cell.key]
    assert f"stored hash {old}, a run now computes {now}" in verdict.stale[stale_cell.key]


@pytest.mark.slow
def test_a_clone_at_another_path_finds_the_committed_cells_done(tmp_path):
    """The repository copied elsewhere: lengthx run of committed paper-A and paper-B (out of the box) cells
    reports them done and writes nothing, Figure 3's attention data included."""
    clone = tmp_path / "clone"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".hydra", ".results.lock")
    conf = [] if CONF_DIR.is_relative_to(ROOT / "lengthx") else [CONF_DIR.relative_to(ROOT)]  # conf/ or in the package
    for folder in (Path("lengthx"), *conf, Path("results/mini")):  # the corpora are in lengthx/corpora/
        shutil.copytree(ROOT / folder, clone / folder, ignore=skip)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(clone), "OMP_NUM_THREADS": "1",
           "LENGTHX_RESULTS": "results"}  # the committed results, as `make reproduce-mini` writes them
    where = subprocess.run([sys.executable, "-c", "import lengthx; print(lengthx.__file__)"], cwd=clone, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(clone)
    csv_before = (clone / "results/mini/results.csv").read_bytes()
    attention = clone / "results/mini/attention/gpt2__pretrained.json"
    attention_before = attention.read_bytes()
    jobs = [["run", *TABLE3_PMAX],
            ["run", "experiment=sb_table2", "model=gpt2", "task.run=pretrained"]]  # paper B's Table 2 cells
    for job in jobs:
        p = subprocess.run([sys.executable, "-m", "lengthx.cli", *job], cwd=clone, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        status = [m.group(1) for m in re.finditer(r"^\S+\|\S+\s+(\w+)", p.stdout, re.M)]  # cell, status
        assert len(status) == 5 and set(status) == {"done"}, p.stdout
    assert (clone / "results/mini/results.csv").read_bytes() == csv_before
    assert attention.read_bytes() == attention_before
