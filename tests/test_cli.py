"""What ``lengthx`` prints about itself: ``lengthx ls``, each command's ``--help``, and how little a help or a
config error loads before it answers (docs/design.md §11)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lengthx.cli import main
from lengthx.config import CONF_DIR, choices


def test_ls_prints_each_description_whole(capsys):
    """An experiment's description is its config's leading comment paragraph, in full, without the usage
    examples under it."""
    main(["ls"])
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    experiments = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))
    assert experiments
    for name in experiments:
        assert lines[name].rstrip().endswith("."), lines[name]  # the paragraph's last sentence, not its first line
        assert "-m experiment=" not in lines[name], lines[name]
    assert "LongChat-13B-16K baseline row (its chat template, method none): 192 + 16 = 208 cells." in lines["aa_table4"]
    assert lines["mini"].rstrip().endswith("L_tr(model) / L_tr(paper).")


def _imports_after(argv: list[str]) -> tuple[int, str, list[str]]:
    """(exit status, stdout, heavy libraries imported) of ``lengthx <argv>`` in a fresh interpreter."""
    code = ("import sys\nfrom lengthx.cli import main\nrc = 0\ntry:\n    main(sys.argv[1:])\n"
            "except SystemExit as e:\n    rc = e.code\n"
            "heavy = [m for m in ('torch', 'transformers', 'datasets', 'accelerate', 'pandas', 'matplotlib', "
            "'hydra') if m in sys.modules]\nprint('HEAVY', ','.join(heavy), file=sys.stderr)\nsys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    heavy = proc.stderr.rsplit("HEAVY", 1)[1].strip()
    return proc.returncode, proc.stdout + proc.stderr, [m for m in heavy.split(",") if m]


@pytest.mark.parametrize("argv, status", [
    (["--help"], 0), (["ls"], 0), (["run", "--help"], 0), (["stats", "--help"], 0), (["calibrate", "--help"], 0),
    (["plan", "--help"], 0), (["tables", "--help"], 0), (["figures", "--help"], 0),
    (["run", "task.num_examples=0"], 2), (["stats", "method.tau=-1"], 2), (["run", "task=pasky"], 2),
])
def test_help_and_config_errors_load_no_heavy_library(argv, status):
    """``--help``, ``ls`` and a wrong value on the command line answer before torch, transformers, pandas or
    even Hydra are imported (the start-up ratios are in ``make bench``: results/bench/cli_startup.md)."""
    rc, out, heavy = _imports_after(argv)
    assert rc == status, out[-2000:]
    assert heavy == [], (argv, heavy)
    if status == 2:
        assert "Traceback" not in out and out.count("lengthx:") == 1, out


def test_run_help_lists_every_method_without_hydra_boilerplate(capsys):
    main(["run", "--help"])
    out = capsys.readouterr().out
    assert "powered by Hydra" not in out and "== Config ==" not in out
    methods = out.split("method=NAME", 1)[1].split("model=NAME", 1)[0]
    for name in choices("method", "run"):
        assert name in methods, name
    for name in choices("method", "train"):  # paper B's training methods belong to lengthx train
        assert name not in methods.replace("chunk", ""), name


def test_each_command_has_its_own_help(capsys):
    texts = {}
    for cmd in ("run", "stats", "calibrate"):
        main([cmd, "--help"])
        texts[cmd] = capsys.readouterr().out
        assert texts[cmd].startswith(f"lengthx {cmd} "), texts[cmd][:80]
    assert "dispersal statistics" in texts["stats"] and "dispersal statistics" not in texts["run"]
    assert "method=NAME                       how τ is chosen: entropy, pmax\n" in texts["calibrate"]
    main(["ls"])
    assert "datas:" not in capsys.readouterr().out


def test_calibrate_with_a_rule_method_fails_before_work(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "method=log"])
    assert exc.value.code == 2
    assert "method=pmax or method=entropy" in capsys.readouterr().err


def test_valid_overrides_pass_the_early_check(capsys):
    """Group choices and valid values go through to the run (here a dry run, which loads nothing)."""
    main(["run", "task=passkey", "method=fixed", "method.tau=0.7", "task.num_examples=2", "task.only=[20k]",
          "batch_size=2", "++task.seed=3", "--dry-run"])
    assert "cell mini-t5|fixed-0.7|passkey|20k" in capsys.readouterr().out


def test_a_dry_run_leaves_no_log_file_handler_behind(capsys):
    """A dry run's Hydra job logs into a temporary folder that is removed afterwards; in a process that goes on (the
    Python API, a test) its file handler must go with it, or a later message is written to a removed file."""
    import logging

    main(["run", "task=passkey", "method=none", "task.num_examples=2", "task.only=[20k]", "--dry-run"])
    loggers = [logging.getLogger(), *(lg for lg in logging.root.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    left = [h.baseFilename for lg in loggers for h in lg.handlers
            if isinstance(h, logging.FileHandler) and "lengthx-dry-run-" in h.baseFilename]
    assert "cell mini-t5|none|passkey|20k" in capsys.readouterr().out and left == []
