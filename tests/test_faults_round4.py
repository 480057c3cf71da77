"""Fault round 4 (docs/faults-round4.md): failed cells that cannot pass for success, a named results place that must
exist, and one builder of Algorithm 1's options for paper A's runs and paper B's perplexity."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import byte_tokenizer, tiny_byte_t5
from omegaconf import OmegaConf
from test_faults import run_command

from lengthx.alignment.algorithm1 import PAPER_TAU_MIN, options_from_config

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def no_start_token(tmp_path_factory) -> Path:
    """A tiny T5 whose config names no ``decoder_start_token_id``: generation fails in every cell."""
    path = tmp_path_factory.mktemp("no-start")
    model = tiny_byte_t5()
    model.config.decoder_start_token_id = None
    model.generation_config.decoder_start_token_id = None
    model.save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    return path


def test_a_run_whose_cells_fail_exits_1_naming_the_count_and_the_first_error(tiny_model_dir, tmp_path):
    """Lines records of 20 and 30 tokens cannot hold one line: both cells fail when they are built."""
    results = tmp_path / "results"
    p = run_command(["run", "task=lines", "method=none", f"model.path={tiny_model_dir}", "model.l_tr=300",
                     "task.num_examples=1", "task.unit=tokens", "task.settings=[20,30]", f"results_dir={results}"])
    assert p.returncode == 1, (p.stdout + p.stderr)[-3000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("lengthx run: 2 cell(s) failed") and "exceeds 20 tokens" in last, last
    assert "Traceback" not in p.stderr
    summary = run_command(["tables", "--summary", "--results-dir", str(results)])
    assert "Failed cells (2;" in summary.stdout and "|none|lines|20tokens: error:" in summary.stdout


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["local", "submitit_local"])
def test_failed_cells_in_a_launchers_jobs_exit_1_naming_them(launcher, tiny_model_dir, tmp_path):
    """The same failing cells in a job of joblib's or submitit's launcher (another process): the command still
    exits 1, and its last line names the cells and the error, once, without a traceback."""
    p = run_command(["run", "-m", f"hydra/launcher={launcher}", "task=lines", "method=none",
                     f"model.path={tiny_model_dir}", "model.l_tr=300", "task.num_examples=1", "task.unit=tokens",
                     "task.settings=[20,30]", f"results_dir={tmp_path / 'results'}"])
    assert p.returncode == 1, (p.stdout + p.stderr)[-3000:]
    last = p.stderr.strip().splitlines()[-1]
    assert "2 cell(s) failed" in last and "exceeds 20 tokens" in last and "|lines|20tokens" in last, last
    assert last.count("lengthx") == 1 and last.count("Fix") == 1, last
    if launcher == "submitit_local":
        assert "1 of 1 job(s) of the sweep failed" in last, last
    assert "Traceback" not in p.stderr


def test_a_schedulers_stop_raised_inside_a_library_ends_the_job_not_the_cell(tiny_model_dir, tmp_path):
    """submitit raises UncompletedJobError from its signal handler wherever the job is; a tokenizer that wraps it in
    a ValueError must not turn it into the cell's error row (the job ends; the rerun resumes the cell)."""
    submitit = pytest.importorskip("submitit")
    from lengthx.core.store import ResultsStore
    from lengthx.core.sweep import compute_cell
    from lengthx.errors import stopped_by_the_scheduler

    def stop() -> None:
        try:
            raise submitit.core.utils.UncompletedJobError("Job not requeued because: timed-out too many times.")
        except RuntimeError as err:
            raise ValueError("Unable to create tensor") from err

    class Stopped:
        first_metric = "accuracy"

        def compute(self, cell, chash, start):
            stop()

        def row_fields(self, cell, chash, start):
            return {}

    with pytest.raises(ValueError) as caught:
        compute_cell(ResultsStore(tmp_path), Stopped(), type("C", (), {"key": "m|none|passkey|1k"})(), "h")
    assert stopped_by_the_scheduler(caught.value) and not stopped_by_the_scheduler(ValueError("a real error"))
    assert not (tmp_path / "results.csv").exists()  # no error row


def test_a_model_that_cannot_generate_stops_before_any_work(no_start_token, tmp_path):
    """An own T5 without decoder_start_token_id: one line with the fix, exit 2, before Algorithm 1 (which spent
    ~80 s on it) and before any cell."""
    results = tmp_path / "results"
    p = run_command(["run", "task=passkey", "method=pmax", f"model.path={no_start_token}", "model.l_tr=300",
                     "task.num_examples=1", "task.settings=[320]", f"results_dir={results}", "batch_size=1"])
    assert p.returncode == 2, (p.stdout + p.stderr)[-3000:]
    assert "cannot generate" in p.stderr and "Fix: set decoder_start_token_id" in p.stderr
    assert not (results / "results.csv").exists() and not (results / "calibration").exists()


def test_figures_of_a_named_results_directory_that_does_not_exist_is_a_user_error(tmp_path):
    p = run_command(["figures", "--results-dir", str(tmp_path / "nowhere")])
    assert p.returncode == 2 and "does not exist" in p.stderr and "Traceback" not in p.stderr


def test_perplexity_and_runs_build_algorithm_1s_options_alike():
    """method.tau_min reaches Algorithm 1 on paper B's perplexity path too (it named its cell pmax-min0.2 but
    searched the paper's grid)."""
    method = OmegaConf.create({"name": "pmax", "scope": "decoder", "search": "bisect", "tau_min": 0.2})
    options = options_from_config(method, OmegaConf.create({"row_stride": 4}))
    assert (options.mode, options.scope, options.search, options.row_stride, options.tau_min) == \
        ("pmax", "decoder", "bisect", 4, 0.2)
    assert options_from_config(OmegaConf.create({"name": "entropy"}), OmegaConf.create({})).tau_min == PAPER_TAU_MIN
    source = (Path(__file__).resolve().parents[1] / "lengthx" / "core" / "perplexity.py").read_text()
    assert "options_from_config(" in source and "CalibrationOptions(" not in source



@pytest.mark.parametrize(("args", "needle"), [
    (["hydra/launcher=slurmm"], "hydra/launcher=slurmm: no such choice. Fix: one of"),
    (["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=abc"], "hydra.launcher.timeout_min=abc"),
])
def test_hydra_overrides_that_do_not_compose_are_one_line_before_any_work(tmp_path, args, needle):
    p = run_command(["run", "-m", "task=passkey", "method=none", f"results_dir={tmp_path / 'r'}", *args])
    assert p.returncode == 2, p.stderr[-2000:]
    assert needle in p.stderr and "Traceback" not in p.stderr and "could not write its record" not in p.stderr
    assert not (tmp_path / "r").exists()


def test_m_after_the_overrides_is_a_sweep(tmp_path):
    p = run_command(["run", "task=passkey", "-m", "method=none,log", "--dry-run"])
    assert p.returncode == 0, p.stderr[-2000:]
    assert "mini-t5|none|passkey|20k" in p.stdout and "mini-t5|log|passkey|20k" in p.stdout


def test_topics_counted_in_topics_past_the_conversations_is_refused_before_work(tmp_path):
    """'task.settings=[2560]' meant as tokens: refused with the fix, not an error row and exit 0."""
    p = run_command(["run", "task=topics", "method=none", "task.settings=[2560]", f"results_dir={tmp_path / 'r'}"])
    assert p.returncode == 2 and "2560 topics, but the generated conversations are 1200" in p.stderr, p.stderr[-2000:]
    assert "task.unit=tokens" in p.stderr and not (tmp_path / "r" / "results.csv").exists()


def test_the_far_length_warning_never_suggests_a_unit_num_topics_refuses():
    from lengthx.config import compose
    from lengthx.core.length_limits import far_settings
    from lengthx.tasks import resolve_settings

    cfg = compose(["task=topics", "task.unit=tokens", "task.settings=[20000]", "task.num_topics=3", "model.l_tr=256"])
    warning = far_settings(cfg, resolve_settings(cfg.task, "mini", 256))
    assert warning is not None and "task.unit=topics" not in warning and "lengths in tokens" in warning


def test_a_reading_names_half_the_training_length_as_such():
    from lengthx.report.tables.reading import ratio_text

    assert [ratio_text(r) for r in (0.5, 0.98, 2.5, 3.98, 10.4, 29.03)] == ["0.5", "1", "2.5", "4", "10", "29"]


def test_the_summary_prints_a_value_as_the_reading_rounds_it():
    from lengthx.report.tables.summary import short_number

    assert [short_number(v) for v in (73.3333333, 100.0, 0.2834271, 1532.77, 0.0)] == ["73.3", "100", "0.283", "1533", "0"]


def test_the_demo_summarises_its_own_cells_only():
    """make demo runs and summarises one results place of its own, not every run of results/local."""
    import re
    import subprocess

    root = Path(__file__).resolve().parents[1]
    make = subprocess.run(["make", "-n", "-B", "demo", "VENV=.venv-none"], cwd=root, capture_output=True, text=True)
    lines = [line for line in make.stdout.splitlines() if "/lengthx " in line]
    assert len(lines) == 3, make.stdout
    places = {m.group(1) for line in lines for m in re.finditer(r"(?:results_dir=|--results-dir )(\S+)", line)}
    assert places == {"results/local/demo"}, lines


def test_plan_names_no_empty_overrides():
    p = run_command(["plan"])
    assert p.returncode == 0 and "distinct cells listed\n" in p.stdout and "listed ()" not in p.stdout


@pytest.mark.parametrize(("value", "key"), [("task.num_examples=-3", "task.num_examples=-3"),
                                            ("calibration.num_examples=-2", "calibration.num_examples=-2"),
                                            ("device=tpu", "device=tpu"), ("task.num_examples=abc", "task.num_examples=abc")])
def test_plan_validates_as_run_does_before_listing_anything(value, key):
    p = run_command(["plan", "experiment=aa_table4", value, "--estimate"])
    assert p.returncode == 2 and key in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert "distinct cells" not in p.stdout and "GPU-hours" not in p.stdout


def test_a_truncated_costs_file_is_named_with_the_fix(tmp_path):
    from lengthx.core.estimate import CPU_COSTS, cpu_costs

    cut = tmp_path / "estimate_costs.json"
    cut.write_bytes(CPU_COSTS.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"estimate_costs.json: not a costs file .*git checkout"):
        cpu_costs(cut)
    cut.write_text("[]")
    with pytest.raises(ValueError, match=r"no device, passes, how in it"):
        cpu_costs(cut)


def test_the_results_place_is_the_checkouts_from_any_directory_inside_it(monkeypatch, tmp_path):
    from lengthx.config import compose, default_results_dir

    root = Path(__file__).resolve().parents[1]
    monkeypatch.delenv("LENGTHX_RESULTS", raising=False)
    monkeypatch.chdir(root / "docs")
    assert Path(compose(["task=passkey"]).results_dir) == root / "results" / "local" / "mini"
    assert default_results_dir() == root / "results" / "local" / "mini"
    monkeypatch.setenv("LENGTHX_RESULTS", "results")
    assert Path(compose(["task=passkey"]).results_dir) == root / "results" / "mini"
    monkeypatch.chdir(tmp_path)  # outside the checkout: the working directory's, as before
    assert compose(["task=passkey"]).results_dir == "results/mini"


def test_two_own_models_under_one_name_cannot_hide_each_other(tmp_path):
    """a/my-model and c/my-model (other weights) into one store: the second is refused naming both directories,
    so the first's cells are never hidden; the same checkpoint copied elsewhere is the same model."""
    import shutil

    root = Path(__file__).resolve().parents[1]
    a = Path(shutil.copytree(root / "lengthx" / "checkpoints" / "mini-t5", tmp_path / "a" / "my-model"))
    c = Path(shutil.copytree(a, tmp_path / "c" / "my-model"))
    weights = bytearray((c / "model.safetensors").read_bytes())
    weights[len(weights) // 2: len(weights) // 2 + 64] = bytes(64)
    (c / "model.safetensors").write_bytes(bytes(weights))
    results = tmp_path / "results"

    def run(path: Path) -> object:
        return run_command(["run", "model=hf", f"model.path={path}", "model.l_tr=256", "task=passkey", "method=none",
                            "task.num_examples=1", "task.settings=[300]", "task.unit=tokens", f"results_dir={results}"])

    assert run(a).returncode == 0
    p = run(c)
    assert p.returncode == 2 and "model.name=my-model is taken" in p.stderr, p.stderr[-2000:]
    assert str(a) in p.stderr and str(c) in p.stderr and "Traceback" not in p.stderr
    same = Path(shutil.copytree(a, tmp_path / "b" / "my-model"))
    assert run(same).returncode == 0  # the same weights at another path: the same cells, done


def test_the_install_takes_the_torch_index_it_is_given():
    """make install's torch pin comes from TORCH_INDEX when set (the CPU-only build one setting away), and from
    pip's own configuration when not."""
    import subprocess

    root = Path(__file__).resolve().parents[1]

    def install(*extra: str) -> str:
        return subprocess.run(["make", "-n", "-B", "install", "VENV=/tmp/lengthx-none", *extra], cwd=root,
                              capture_output=True, text=True).stdout

    cpu = "https://download.pytorch.org/whl/cpu"
    assert f"torch==2.13.0 --index-url {cpu}" in install(f"TORCH_INDEX={cpu}")
    assert "--index-url" not in install()


def test_a_refused_training_leaves_nothing_behind(tmp_path):
    """A run refused inside Hydra's job (a method that needs an OOTB run not trained yet) exits 2 and leaves no
    runs/.hydra/<date>/train.log."""
    import subprocess

    from test_faults import LENGTHX, _env

    p = subprocess.run(LENGTHX + ["train", "model=gpt2", "method=chunk-0.25", "l_e_factor=4"], cwd=tmp_path,
                       capture_output=True, text=True, env=_env(), timeout=300)
    assert p.returncode == 2 and "OOTB run" in p.stderr, p.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


def test_algorithm_1_shows_each_tau_it_tries(caplog):
    """Algorithm 1's search (minutes at long lengths) logs its target and every τ it measures as it goes."""
    import logging

    from transformers import AutoTokenizer, T5ForConditionalGeneration

    import lengthx

    path = lengthx.mini_path("mini-t5")
    model = T5ForConditionalGeneration.from_pretrained(path, dtype="float32")
    tok = AutoTokenizer.from_pretrained(path)
    short = [e.prompt for e in lengthx.task_examples("passkey", tok, 256, n=1)]
    long = [lengthx.task_examples("passkey", tok, 1024, seed=1)[0].prompt]
    with caplog.at_level(logging.INFO, logger="lengthx"):
        result = lengthx.calibrate(model, tok, short, long, mode="pmax", search="grid", row_stride=8)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Algorithm 1:")]
    assert lines[0].startswith("Algorithm 1: S̄_tr(1) = ")
    tried = [line for line in lines if "S̄_ex(τ = " in line]
    assert len(tried) == len(result.evaluated) >= 2


def test_a_mount_name_with_utf8_and_a_space_is_read_whole_and_its_local_locks_refused():
    from lengthx.core.store.mounts import _unescape, node_local_locks

    assert _unescape(r"/mnt/lab\040däta") == "/mnt/lab däta"
    info = "36 35 0:45 / /mnt/lab\\040däta rw,relatime shared:1 - nfs4 server:/x rw,vers=4.2,local_lock=flock\n"
    why = node_local_locks(Path("/mnt/lab däta/results"), info)
    assert why is not None and "local_lock=flock" in why


def test_an_own_models_stated_length_past_the_limit_names_the_file_and_key(tmp_path):
    """config.json's n_positions=10**12 is the checkpoint's claim, not a model.l_tr the user set."""
    import json

    from conftest import tiny_gpt2

    tiny_gpt2().save_pretrained(tmp_path)
    byte_tokenizer().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["n_positions"] = 10**12
    (tmp_path / "config.json").write_text(json.dumps(config))
    p = run_command(["run", "model=hf", f"model.path={tmp_path}", "task=passkey", "method=none", "--dry-run"])
    assert p.returncode == 2 and "config.json states n_positions=1000000000000" in p.stderr, p.stderr[-2000:]
    assert "model.l_tr=1000000000000" not in p.stderr


def test_the_estimate_says_what_share_it_prices_and_whose_costs_they_are():
    p = run_command(["plan", "profile=paper", "experiment=aa_table4", "device=cpu", "--estimate"])
    assert p.returncode == 0, p.stderr[-2000:]
    total = next(line for line in p.stdout.splitlines() if line.strip().startswith("total"))
    share = int(total.split("(")[1].split("%")[0])
    assert 0 <= share < 100 and "of passes priced) + unmeasured" in total
    assert "note: device=cpu was asked, but these are the costs measured on NVIDIA" in p.stdout
