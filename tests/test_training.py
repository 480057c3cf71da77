"""Paper B training (Accelerate) and perplexity evaluation, end to end on tiny models built from configs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import L_T, byte_tokenizer, tiny_gpt2
from conftest import train_overrides as overrides
from omegaconf import OmegaConf
from safetensors.torch import load_file

from lengthx.cli.train import compose_train_config, train_main
from lengthx.core.store import ResultsStore
from lengthx.data.corpora import stdlib_documents
from lengthx.data.pieces import piece_dataset, split_pieces
from lengthx.data.splits import is_test_document
from lengthx.segmented.loop import WarmupCosine, read_curve, train
from lengthx.segmented.plan import make_plan, micro_batch_indices
from lengthx.segmented.sampling import SegmentMethod

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- plan, schedule, data ---------------------------------------------------------------------------------
def test_compute_equivalent_budgets():
    plans = {
        m: make_plan(SegmentMethod.parse(m), 1024, 4096, pieces=64, batch_size=4, grad_accum=2)
        for m in ("chunk-0.25", "prefix-0.5", "full")
    }
    assert {p.tokens for p in plans.values()} == {64 * 4096}, "same token count for every method"
    assert plans["chunk-0.25"].epochs == 4.0 and plans["full"].epochs == 1.0  # eq. 2: L_e / L_t
    assert plans["chunk-0.25"].train_length == 1024 and plans["full"].train_length == 4096
    assert plans["chunk-0.25"].steps == 4 * 64 // 8 and plans["full"].steps == 64 // 8
    da = make_plan(SegmentMethod.parse("da"), 1024, 1024, pieces=256, batch_size=4, grad_accum=2)
    assert da.epochs == 1.0 and da.tokens == 256 * 1024
    assert make_plan(SegmentMethod.parse("chunk-0.25"), 16, 64, 100, 2, 1, max_steps=5).steps == 5
    tenth = {m: make_plan(SegmentMethod.parse(m), 1024, 4096, pieces=640, batch_size=4, grad_accum=2,
                          budget_fraction=0.1) for m in ("chunk-0.25", "prefix-0.5", "full")}
    assert {p.tokens for p in tenth.values()} == {64 * 4096}, "a fraction keeps the budgets equal"
    assert tenth["chunk-0.25"].epochs == pytest.approx(0.4)
    with pytest.raises(ValueError, match="fewer than one global batch"):
        make_plan(SegmentMethod.parse("full"), 16, 64, pieces=3, batch_size=4, grad_accum=1)


def test_warmup_cosine_and_batch_indices():
    f = WarmupCosine(warmup=4, total=20, min_ratio=0.1)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(4) == 1.0 and abs(f(20) - 0.1) < 1e-12 and f(12) == pytest.approx(0.55)
    # 2 processes × 2 accumulation steps × batch 3: every global index exactly once per step
    seen = [k for m in range(2) for r in range(2) for k in micro_batch_indices(5, m, r, 3, 2, 2)]
    assert sorted(seen) == list(range(60, 72))


def test_stdlib_documents_hold_out_test_files():
    train_docs = stdlib_documents("train", test_percent=10, max_docs=6)
    test_docs = stdlib_documents("test", test_percent=10, max_docs=6)
    assert len(train_docs) == 6 and len(test_docs) == 6
    assert not set(train_docs["id"]) & set(test_docs["id"])
    assert all(is_test_document(i, 10) for i in test_docs["id"])
    assert not any(is_test_document(i, 10) for i in train_docs["id"])
    assert stdlib_documents("test", test_percent=10, max_docs=6)["id"] == test_docs["id"]  # deterministic
    assert all(i.endswith(".py") and "site-packages" not in i for i in train_docs["id"])


def test_pieces_one_document_each_remainder_dropped(models, corpus, tmp_path):
    assert split_pieces(list(range(10)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(models["gpt2"])
    cfg = compose_train_config(overrides(models, corpus, tmp_path)).data
    pieces = piece_dataset(cfg, tok, "train", 64)
    assert len(pieces) > 0 and pieces[0]["input_ids"].shape == (64,)
    root = Path(os.path.commonpath([str(Path(f).resolve()) for f in corpus]))
    rel = {f: Path(f).resolve().relative_to(root).as_posix() for f in corpus}  # ids relative to the corpus root
    doc = next(f for f in corpus if not is_test_document(rel[f], 30))
    ids = tok(Path(doc).read_text(), add_special_tokens=False)["input_ids"]
    own = [p["input_ids"].tolist() for p in pieces if p["doc_id"] == rel[doc]]
    assert own == split_pieces(ids, 64) and len(own) == len(ids) // 64
    again = piece_dataset(cfg, tok, "train", 64)  # from the on-disk cache
    assert torch.equal(again[:]["input_ids"], pieces[:]["input_ids"])


def test_file_split_does_not_depend_on_where_the_corpus_lies(corpus, tmp_path):
    from lengthx.data.corpora import file_documents

    moved = tmp_path / "elsewhere" / "deeper"
    moved.mkdir(parents=True)
    for f in corpus:
        shutil.copy(f, moved / Path(f).name)
    here = file_documents(list(corpus), "test", test_percent=30, cache_dir=str(tmp_path / "hf"))
    there = file_documents([str(moved)], "test", test_percent=30, cache_dir=str(tmp_path / "hf"))
    assert len(here) > 0 and here["id"] == there["id"] and here["text"] == there["text"]


def test_archive_corpus_is_extracted_once_and_read_like_files(tmp_path):
    import tarfile

    from lengthx.data.corpora import extract_archive, load_documents

    src = tmp_path / "src" / "docs"
    src.mkdir(parents=True)
    for i in range(12):
        (src / f"doc{i:02d}.txt").write_text(f"document {i} " * 50)
    archive = tmp_path / "docs.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(src, arcname="docs")
    data = OmegaConf.create({"source": "archive", "archive": str(archive), "test_percent": 25,
                             "cache_dir": str(tmp_path / "cache")})
    test = load_documents(data, "test")
    train = load_documents(data, "train")
    assert len(test) + len(train) == 12 and not set(test["id"]) & set(train["id"])
    assert all(i.startswith("doc") for i in test["id"])  # relative to the archive's root, not the cache path
    assert extract_archive(archive, tmp_path / "cache") == extract_archive(archive, tmp_path / "cache")
    with pytest.raises(ValueError, match="archive_sha256"):
        extract_archive(archive, tmp_path / "cache2", sha256="0" * 64)


# ---- training ---------------------------------------------------------------------------------------------
def test_a_few_steps_decrease_the_loss(models, corpus, tmp_path):
    res = train(
        compose_train_config(
            overrides(
                models,
                corpus,
                tmp_path,
                **{"train.max_steps": 16, "train.lr": 3e-3, "train.warmup_steps": 1, "train.batch_size": 4},
            )
        )
    )
    losses = [r["loss"] for r in res.curve]
    assert len(losses) == 16 and res.final_dir is not None
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.3
    assert res.curve[-1]["tokens"] == 16 * 4 * L_T
    meta = json.loads((res.final_dir / "lengthx_train.json").read_text())
    assert meta["method"] == "chunk-0.25" and (meta["l_t"], meta["l_e"]) == (L_T, 4 * L_T)
    assert meta["max_positions"] == 4 * L_T  # wpe interpolated to L_e and saved with it


def test_kill_and_resume_is_exact(models, corpus, tmp_path):
    common = {"train.max_steps": 6, "train.save_every": 2, "train.grad_accum": 2, "train.lr": 1e-3}
    full = train(
        compose_train_config(overrides(models, corpus, tmp_path, method="prefix-0.5", out="a", **common))
    )
    # "killed" after step 5: the newest checkpoint is step 4, step 5 is lost and redone
    stopped = train(
        compose_train_config(
            overrides(
                models,
                corpus,
                tmp_path,
                method="prefix-0.5",
                out="b",
                **common,
                **{"train.stop_after_steps": 5},
            )
        )
    )
    assert stopped.step == 5 and stopped.final_dir is None
    assert [r["step"] for r in read_curve(tmp_path / "b")] == [1, 2, 3, 4, 5]
    resumed = train(
        compose_train_config(overrides(models, corpus, tmp_path, method="prefix-0.5", out="b", **common))
    )
    assert resumed.resumed_from == 4 and resumed.step == 6
    assert [r["step"] for r in resumed.curve] == [1, 2, 3, 4, 5, 6], "the curve continues, no restart"
    assert [r["loss"] for r in resumed.curve] == [r["loss"] for r in full.curve]
    wa, wb = (
        load_file(full.final_dir / "model.safetensors"),
        load_file(resumed.final_dir / "model.safetensors"),
    )
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    # the optimizer's moments, read back as tensors only (checkpoints hold safetensors and JSON)
    oa = load_file(tmp_path / "a/checkpoints/step-0000006/optimizer.safetensors")
    ob = load_file(tmp_path / "b/checkpoints/step-0000006/optimizer.safetensors")
    assert oa.keys() == ob.keys() and any(k.endswith("/exp_avg_sq") for k in oa)
    assert all(torch.equal(oa[k], ob[k]) for k in oa)
    # a different configuration in the same directory is refused
    with pytest.raises(FileExistsError, match="another configuration"):
        train(
            compose_train_config(overrides(models, corpus, tmp_path, method="chunk-0.5", out="b", **common))
        )


def test_other_families_train_and_evaluate(models, corpus, tmp_path, monkeypatch):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from lengthx.config import CONF_DIR, register_resolvers
    from lengthx.core.perplexity import run_task

    bloom = train(
        compose_train_config(
            overrides(
                models,
                corpus,
                tmp_path,
                model="bloom-1b1",
                method="prefix-0.5",
                out="runs/mini/bloom-1b1/prefix-0.5-4x",
                **{"train.max_steps": 3},
            )
        )
    )
    neox = train(
        compose_train_config(
            overrides(
                models,
                corpus,
                tmp_path,
                model="pythia-160m",
                method="full",
                out="neox",
                **{"train.max_steps": 2},
            )
        )
    )
    assert bloom.final_dir and neox.final_dir
    assert json.loads((neox.final_dir / "config.json").read_text())["max_position_embeddings"] == 4 * L_T

    register_resolvers()
    results = tmp_path / "results"

    monkeypatch.setattr("lengthx.segmented.plan.RUNS_DIR", tmp_path / "runs")

    def evaluate(model: str, path: str | None, *extra: str) -> list[dict]:
        files = ",".join(f"'{f}'" for f in corpus)
        where = [f"model.path={path}"] if path else []
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = compose(
                config_name="run",
                overrides=[
                    "task=segmented_ppl",
                    f"model={model}",
                    *where,
                    f"model.l_tr={L_T}",
                    "device=cpu",
                    f"results_dir={results}",
                    "task.num_examples=3",
                    "task.factors=[1,2,4]",
                    "data=files",
                    f"data.files=[{files}]",
                    "data.test_percent=30",
                    f"data.cache_dir={tmp_path / 'cache'}",
                    *extra,
                ],
            )
        return run_task(cfg)

    # a missing run names the command that trains it, OOTB first (paper B §4.3)
    with pytest.raises(FileNotFoundError, match="needs the run ootb-1x.*lengthx train model=bloom-1b1 .*method=ootb"):
        evaluate("bloom-1b1", None, "task.run=chunk-0.5-2x", "task.train_missing=false")
    # the run by its name under runs/<profile>/<model>/, with Figure 3's histogram at 2L_t from 2 sequences
    medians = ("task.attention_medians=2", "task.attention_factor=2")
    summary = evaluate("bloom-1b1", None, "task.run=prefix-0.5-4x", *medians)
    assert [s["status"] for s in summary] == ["ok"] * 3
    assert [s["cell"] for s in summary] == [
        f"bloom-1b1|prefix-0.5@4L_t|segmented_ppl|{s}" for s in ("L_t", "2L_t", "4L_t")
    ]
    ootb = evaluate("gpt2", models["gpt2"])
    assert [s["cell"].split("|")[1] for s in ootb] == ["pretrained"] * 3
    df = ResultsStore(results).read()
    assert set(df["paper"]) == {"B"} and set(df["metric"]) == {"ppl", "ppl_tokens"}
    row = df[(df["model"] == "gpt2") & (df["setting"] == "4L_t") & (df["metric"] == "ppl")].iloc[0]
    assert row["L_req"] == 4 * L_T and row["n"] == 3 and "APE interpolated 16->64" in row["message"]
    assert all(1.0 < v < 1000 for v in df["value"])
    recs = ResultsStore(results).load_records("gpt2|pretrained|segmented_ppl|2L_t")
    assert len(recs) == 3 and all(r["scores"]["tokens"] == 2 * L_T - 1 for r in recs.values())
    assert [s["status"] for s in evaluate("bloom-1b1", None, "task.run=prefix-0.5-4x", *medians)] == ["done"] * 3

    # other weights under the same cell key are scored afresh, never from the earlier weights' records
    from transformers import AutoModelForCausalLM

    changed = AutoModelForCausalLM.from_pretrained(models["gpt2"])
    with torch.no_grad():
        changed.transformer.h[0].mlp.c_fc.weight.mul_(3.0)
    shutil.copytree(models["gpt2"], tmp_path / "gpt2-changed")  # its tokenizer too
    changed.save_pretrained(tmp_path / "gpt2-changed")
    assert [s["status"] for s in evaluate("gpt2", str(tmp_path / "gpt2-changed"))] == ["ok"] * 3
    ppl = ResultsStore(results).read().query("model == 'gpt2' and setting == '2L_t' and metric == 'ppl'")["value"]
    assert len(ppl) == 2 and ppl.iloc[0] != pytest.approx(ppl.iloc[1], rel=1e-6)

    evaluate("bloom-1b1", models["bloom-1b1"], *medians)
    hists = {p.stem: json.loads(p.read_text()) for p in (results / "attention").glob("*.json")}
    assert set(hists) == {"bloom-1b1__prefix-0.5@4L_t", "bloom-1b1__pretrained"}
    for h in hists.values():  # 2 layers x 4 heads x L_T queries past L_t (of 2 L_T) x 2 sequences
        assert sum(h["counts"]) == 2 * 4 * L_T * 2 and h["setting"] == "2L_t"
        assert 0 < h["median"] < 1 and h["uniform_median"] == pytest.approx(1 / (L_T + 1 + L_T / 2), rel=0.1)
    from lengthx.cli.figures import figures_main

    figures_main(["--results-dir", str(results), "--out", str(tmp_path / "figs")])
    assert (tmp_path / "figs" / "sb_fig3_attention_medians.png").stat().st_size > 10_000


def test_cli_entry_and_fail_fast(models, corpus, tmp_path):
    train_main(
        overrides(
            models,
            corpus,
            tmp_path,
            method="ootb",
            out="cli",
            **{"train.max_steps": 2, "hydra.run.dir": tmp_path / "hydra"},
        )
    )
    meta = json.loads((tmp_path / "cli/final/lengthx_train.json").read_text())
    assert meta["label"] == "ootb" and meta["l_e"] == L_T  # DA trains at L_t
    with pytest.raises(SystemExit) as exc:
        train_main(["method=chunky"])
    assert exc.value.code == 2
    with pytest.raises(ValueError, match="encoder-decoder"):
        train(compose_train_config(["model=mini-t5"]))


@pytest.mark.skipif(
    shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None,
    reason="needs torch.distributed's launcher",
)
@pytest.mark.slow
def test_accelerate_launch_two_processes_matches_one(models, corpus, tmp_path):
    """``accelerate launch --num_processes 2`` (gloo on CPU): same global batch and loss curve as one process."""
    accelerate = Path(sys.executable).with_name("accelerate")
    common = {"train.max_steps": 3, "train.grad_accum": 2, "hydra.run.dir": tmp_path / "hydra"}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [
        str(accelerate),
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "lengthx.cli.train",
        *overrides(models, corpus, tmp_path, out="ddp", **common, **{"train.batch_size": 1}),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    single = train(compose_train_config(overrides(models, corpus, tmp_path, out="one", **common)))
    ddp = read_curve(tmp_path / "ddp")
    assert [r["step"] for r in ddp] == [1, 2, 3] and ddp[-1]["tokens"] == single.curve[-1]["tokens"]
    assert all(abs(a["loss"] - b["loss"]) < 1e-4 for a, b in zip(ddp, single.curve, strict=True))
    meta = json.loads((tmp_path / "ddp/final/lengthx_train.json").read_text())
    assert meta["world_size"] == 2


def test_median_attention_past_l_t():

    from lengthx.segmented.lengths import median_attention_past

    model = tiny_gpt2(attn=None)  # stock SDPA: the function switches to eager attention for the probabilities
    ids = torch.randint(0, 64, (2, 24))
    med = median_attention_past(model, ids, 16)
    assert med.shape == (2 * 4 * 2 * 8,) and torch.all((med > 0) & (med <= 1))
    with torch.no_grad():  # zero queries and keys: uniform causal attention, median = 1/(q+1)
        for block in model.transformer.h:
            block.attn.c_attn.weight[:, :64] = 0
            block.attn.c_attn.bias[:64] = 0
    med = median_attention_past(model, ids, 16).view(2, 8, 2 * 4)  # (layer, query, batch·head)
    expected = torch.tensor([1 / (q + 1) for q in range(16, 24)])
    assert torch.allclose(med, expected[None, :, None].expand_as(med), atol=1e-6)


def test_text_factor_scores_the_same_text_at_every_length(corpus, tmp_path):
    """task.text_factor: sequences of every length are cut from the same randomly drawn long pieces."""
    from omegaconf import OmegaConf

    from lengthx.tasks.segmented_ppl import SegmentedPPLTask

    files = [str(f) for f in corpus]
    cfg = OmegaConf.create({"seed": 0, "split": "test", "data": {
        "source": "files", "files": files, "test_percent": 30, "cache_dir": str(tmp_path / "cache")}})
    tok = byte_tokenizer()
    task = SegmentedPPLTask(cfg, "mini", ref_length=4 * L_T)
    long = task.sequences(tok, 4 * L_T, 3)
    assert len(long) == 3 and all(ids.numel() == 4 * L_T for _, ids in long)
    for length in (L_T, 2 * L_T):
        short = task.sequences(tok, length, 3)
        assert len(short) == 3 * (4 * L_T // length)
        assert torch.equal(torch.cat([ids for _, ids in short]), torch.cat([ids for _, ids in long]))
    first = SegmentedPPLTask(cfg, "mini").sequences(tok, 4 * L_T, 3)  # without: the first pieces, in order
    everything = SegmentedPPLTask(cfg, "mini").sequences(tok, 4 * L_T, None)
    assert [s for s, _ in first] == [s for s, _ in everything[:3]]
    assert {s for s, _ in long} <= {s for s, _ in everything}


def test_a_changed_base_checkpoint_is_not_resumed_silently(models, corpus, tmp_path):
    """A run whose base weights changed since (a re-trained mini at the same path) stops with a clear error."""
    base = tmp_path / "base"
    shutil.copytree(models["gpt2"], base)
    ov = overrides(models, corpus, tmp_path, method="da", out="da", **{"train.max_steps": 1})
    ov = [o for o in ov if not o.startswith("model.path=")] + [f"model.path={base}"]
    train(compose_train_config(ov))
    again = train(compose_train_config(ov))  # same weights: a finished run, resumed at its last step
    assert again.step == 1
    from safetensors.torch import save_file

    weights = load_file(base / "model.safetensors")
    save_file({k: v + 0.01 for k, v in weights.items()}, base / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(FileExistsError, match="trained from other weights"):
        train(compose_train_config(ov))


def test_an_archive_is_hashed_once_and_again_when_it_changes(tmp_path, monkeypatch):
    """The archive's digest keys both its extraction and the piece cache: read once, never stale."""
    import hashlib

    from lengthx.data import corpora

    archive = tmp_path / "a.tar.xz"
    archive.write_bytes(b"first")
    reads = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self) or real(self))
    assert corpora.file_sha256(archive) == corpora.file_sha256(str(archive)) == hashlib.sha256(b"first").hexdigest()
    assert len(reads) == 1
    archive.write_bytes(b"second, longer")
    os.utime(archive, ns=(1, 1))
    assert corpora.file_sha256(archive) == hashlib.sha256(b"second, longer").hexdigest()
