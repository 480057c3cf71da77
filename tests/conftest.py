"""Shared fixtures and builders: tiny models built from configs and a byte-level tokenizer (no network, no
downloads). Builders are plain functions (import them with ``from conftest import tiny_t5``) so a test can
pass config overrides; each seeds torch itself, so the same arguments give the same weights."""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from transformers import (
    BloomConfig,
    BloomForCausalLM,
    ByT5Tokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    T5Config,
    T5ForConditionalGeneration,
)

from lengthx.attention.temperature import ATTN_NAME, register
from lengthx.data.splits import is_test_document
from lengthx.models import LoadedModel, get_family


def load_script(relpath: str) -> ModuleType:
    """A script of the repository (``scripts/…``, not a package) imported as a module under its file name, its folder
    on the path for its own imports (as when it runs)."""
    path = Path(__file__).resolve().parents[1] / relpath
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def refused_before_work(argv: list[str], capsys, results_dir: Path) -> str:
    """``lengthx`` with ``argv`` exits 2 with one line that names the fix, before any result is written; the
    line."""
    from lengthx.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "Fix:" in err, err
    assert not (results_dir / "results.csv").exists()
    return err


def tiny_t5(attn: str = ATTN_NAME, seed: int = 0, **overrides) -> T5ForConditionalGeneration:
    """A 2-layer T5 with learned relative buckets, random weights, eval mode."""
    register()
    cfg = dict(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
               relative_attention_num_buckets=32, relative_attention_max_distance=64, dropout_rate=0.0,
               decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    cfg.update(overrides)
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(T5Config(**cfg))
    # random init gives near-zero relative bias; make it visible so position effects are tested
    with torch.no_grad():
        model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.normal_(0, 2.0)
    model.config._attn_implementation = attn
    model.set_attn_implementation(attn)
    return model.eval()


def tiny_byte_t5(attn: str = "sdpa") -> T5ForConditionalGeneration:
    """:func:`tiny_t5` with ByT5's 384-token vocabulary (2 heads of 16), to pair with :func:`byte_tokenizer`."""
    return tiny_t5(attn=attn, vocab_size=384, d_model=32, num_heads=2, d_kv=16)


def _causal_lm(config_cls: type[PretrainedConfig], model_cls: type[PreTrainedModel], defaults: dict, seed: int,
               attn: str | None, overrides: dict) -> PreTrainedModel:
    torch.manual_seed(seed)
    cfg = {**defaults, **overrides}
    if attn is not None:
        cfg["attn_implementation"] = attn
    return model_cls(config_cls(**cfg)).eval()


def tiny_gpt2(seed: int = 0, attn: str | None = "eager", **overrides) -> GPT2LMHeadModel:
    """A 2-layer, 4-head GPT-2 (width 32, vocabulary 64, 64 positions), random weights, eval mode."""
    defaults = dict(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2)
    return _causal_lm(GPT2Config, GPT2LMHeadModel, defaults, seed, attn, overrides)


def tiny_neox(seed: int = 0, attn: str | None = "eager", **overrides) -> GPTNeoXForCausalLM:
    """A 2-layer, 4-head GPT-NeoX (width 32, vocabulary 64, 64 positions), random weights, eval mode."""
    defaults = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                    max_position_embeddings=64, bos_token_id=1, eos_token_id=2)
    return _causal_lm(GPTNeoXConfig, GPTNeoXForCausalLM, defaults, seed, attn, overrides)


def tiny_bloom(seed: int = 0, layers: int = 2, sharpen: bool = False, attn: str | None = "eager",
               **overrides) -> BloomForCausalLM:
    """A 4-head BLOOM (width 32, vocabulary 64), random weights, eval mode.

    ``sharpen``: larger initial weights (range 0.1) and query/key/value weights doubled, so that attention is
    peaked enough for τ to have a visible effect."""
    defaults = dict(vocab_size=64, hidden_size=32, n_layer=layers, n_head=4, pad_token_id=0, bos_token_id=1,
                    eos_token_id=2)
    if sharpen:
        defaults["initializer_range"] = 0.1
    model = _causal_lm(BloomConfig, BloomForCausalLM, defaults, seed, attn, overrides)
    if sharpen:
        with torch.no_grad():
            for block in model.transformer.h:
                block.self_attention.query_key_value.weight.mul_(2.0)
    return model


def byte_tokenizer() -> ByT5Tokenizer:
    """ByT5's byte-level tokenizer: needs no files, 384 ids (3 special tokens, 256 bytes, 125 extra ids)."""
    return ByT5Tokenizer()


def loaded_model(model: PreTrainedModel, family: str, l_tr: int, tokenizer=None, name: str = "tiny") -> LoadedModel:
    """``model`` as ``lengthx.models.load_model`` would hand it over (on CPU), for alignment and task tests."""
    return LoadedModel(name, model, tokenizer, get_family(family), l_tr, torch.device("cpu"))


@pytest.fixture(scope="module")
def byt5() -> ByT5Tokenizer:
    """:func:`byte_tokenizer`, one per test module."""
    return byte_tokenizer()


@pytest.fixture
def padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two sequences of lengths 40 and 27 (right padded), and decoder inputs."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 64, (2, 40), generator=g)
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[1, 27:] = 0
    ids[1, 27:] = 0
    dec = torch.randint(3, 64, (2, 6), generator=g)
    return ids, mask, dec


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A tiny T5 with a byte-level tokenizer, saved like a hub checkpoint (for CLI and runner tests)."""
    path = tmp_path_factory.mktemp("tiny-t5")
    tiny_byte_t5().save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one intra-op thread (on a shared 2-core box more threads only spin).

    Use per module with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- paper B training: tiny causal LMs and a learnable corpus ------------------------------------------
L_T = 16  # training length of the tiny causal LMs of ``models``
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[str]:
    """Twelve small documents with learnable structure (repeated phrases, counters)."""
    for _ in range(100):  # the split hashes the absolute path: take a folder where some document is held out
        root = tmp_path_factory.mktemp("corpus")
        if any(is_test_document(str((root / f"doc{d:02d}.txt").resolve()), 30) for d in range(12)):
            break
    rng = random.Random(0)
    files = []
    for d in range(12):
        lines = []
        for n in range(60):
            w = rng.sample(WORDS, 3)
            lines.append(f"{d}:{n} the {w[0]} sees the {w[1]} and the {w[2]}.")
        path = root / f"doc{d:02d}.txt"
        path.write_text("\n".join(lines))
        files.append(str(path))
    assert any(is_test_document(str(Path(f).resolve()), 30) for f in files)
    return files


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """Tiny GPT-2 / GPT-NeoX / BLOOM checkpoints (L_t = 16) with a byte-level tokenizer, saved to disk."""
    root = tmp_path_factory.mktemp("models")
    common = {"vocab_size": 384, "bos_token_id": 1, "eos_token_id": 1, "pad_token_id": 0}
    no_dropout = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    made = {
        "gpt2": tiny_gpt2(attn=None, n_positions=L_T, **no_dropout, **common),
        "pythia-160m": tiny_neox(attn=None, max_position_embeddings=L_T, **common),
        "bloom-1b1": tiny_bloom(attn=None, **common),
    }
    out = {}
    for name, model in made.items():
        path = root / name
        model.save_pretrained(path)
        byte_tokenizer().save_pretrained(path)
        out[name] = str(path)
    return out


def train_overrides(models, corpus, tmp_path, model="gpt2", method="chunk-0.25", out="run", **extra) -> list[str]:
    """``lengthx train`` overrides for a tiny model of ``models`` on ``corpus`` (output under ``tmp_path/out``)."""
    files = ",".join(f"'{f}'" for f in corpus)
    ov = [
        f"model={model}",
        f"model.path={models[model]}",
        f"model.l_tr={L_T}",
        f"method={method}",
        "l_e_factor=4",
        "start=pretrained",  # the tiny model itself, not an OOTB run of it
        "data=files",
        f"data.files=[{files}]",
        "data.test_percent=30",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"train.output_dir={tmp_path / out}",
        "train.progress=false",
        "train.batch_size=2",
        "train.save_every=0",
        "train.budget_fraction=1.0",  # the whole (tiny) corpus; profile=mini trains on a tenth of its own
        "train.lr=3e-4",
    ]
    return ov + [f"{k}={v}" for k, v in extra.items()]


def in_process(argv: list[str], cwd: str | Path | None = None, input: str | None = None,
               **env: str) -> subprocess.CompletedProcess:
    """Run a command in this process as its own process would run it, where the process boundary is not what a
    test checks (a subprocess pays ~5 s of torch and transformers imports): ``in_process(["lengthx", *args])``
    is ``python -m lengthx.cli *args`` (its ``__main__``), ``in_process([script, *args])`` is ``python script
    *args``. Returns a :class:`subprocess.CompletedProcess` with the exit status, stdout and stderr, read as
    Python exits: ``sys.exit(n)`` is n, a normal return 0, an uncaught exception its traceback on stderr and 1.

    As in a fresh process, the root logger has no handler when the command starts (its ``logging.basicConfig``
    and Hydra's logging put warnings on stderr), ``LENGTHX_DEBUG`` is unset and torch runs one thread; ``env`` is
    set for the call (variables a command reads while it runs, not at import), ``cwd`` is its working directory,
    ``input`` what it reads on stdin. Afterwards the environment, working directory, ``sys.argv``, ``sys.path``,
    ``sys.stdin``, signal handlers, torch's threads, logging and Hydra's global state (its config too: a later run
    through the API must not see this job's) are restored."""
    import io
    import logging
    import os
    import runpy
    import signal
    import sys
    import traceback
    from contextlib import redirect_stderr, redirect_stdout

    import torch
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    argv = [str(a) for a in argv]
    environ, where, saved_argv, saved_path, stdin = dict(os.environ), os.getcwd(), sys.argv, sys.path[:], sys.stdin
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    root = logging.getLogger()
    root_handlers, root_level, threads = root.handlers[:], root.level, torch.get_num_threads()
    loggers = {name: (lg.handlers[:], lg.level, lg.propagate, lg.disabled)  # Hydra's job logging reconfigures them
               for name, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    hydra_before = GlobalHydra.instance().is_initialized()
    os.environ.pop("LENGTHX_DEBUG", None)
    os.environ.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **env})
    torch.set_num_threads(1)
    if cwd is not None:
        os.chdir(cwd)
    sys.argv = argv
    if input is not None:
        sys.stdin = io.StringIO(input)
    root.handlers = []
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                if argv[0] == "lengthx":
                    runpy.run_module("lengthx.cli", run_name="__main__")
                else:
                    runpy.run_path(argv[0], run_name="__main__")
                status = 0
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
                if not isinstance(exc.code, int | None):
                    print(exc.code, file=sys.stderr)
            except Exception:  # noqa: BLE001 - what the interpreter does with an uncaught exception
                traceback.print_exc()
                status = 1
    finally:
        for handler in root.handlers:
            if handler not in root_handlers:
                handler.close()
        root.handlers = root_handlers
        root.setLevel(root_level)
        for name, lg in list(logging.root.manager.loggerDict.items()):  # a job's file handlers end with the job
            if not isinstance(lg, logging.Logger):
                continue
            kept, level, propagate, disabled = loggers.get(name, ([], logging.NOTSET, True, False))
            for handler in lg.handlers:
                if handler not in kept:
                    handler.close()
            lg.handlers, lg.propagate, lg.disabled = kept, propagate, disabled
            lg.setLevel(level)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)
        if not hydra_before:  # Hydra's global state ends with the process
            GlobalHydra.instance().clear()
            HydraConfig.instance().cfg = None
        sys.argv, sys.path[:], sys.stdin = saved_argv, saved_path, stdin
        os.chdir(where)
        for key in set(os.environ) - set(environ):
            del os.environ[key]
        os.environ.update(environ)
    return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


@pytest.fixture
def as_a_process():
    """:func:`in_process`, for a test (a module-scoped fixture calls the function itself)."""
    return in_process
