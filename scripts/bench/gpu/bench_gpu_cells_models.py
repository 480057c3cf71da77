"""The paper models of scripts/bench/gpu/bench_gpu_cells.py as random-weight checkpoints (docs/gpu.md, "Every paper model's
largest cell"): each model's real configuration, its tokenizer's real vocabulary size, and a ``save_pretrained``
directory that ``lengthx run`` / ``lengthx train`` load as ``model.path=DIR``. The package ships none of these
configurations; they are each hub repository's ``config.json`` numbers (the comment above :data:`ARCH`)."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import yaml

ROOT = Path(__file__).resolve().parents[3]
CONF = ROOT / "lengthx" / "conf"
CKPT = ROOT / "lengthx" / "checkpoints"
_T5 = dict(d_kv=64, relative_attention_num_buckets=32, relative_attention_max_distance=128, vocab_size=32128,
           feed_forward_proj="gated-gelu", tie_word_embeddings=False)  # T5 v1.1 (Flan-T5 and the LM-adapted T5)
T5_SIZES = {"large": dict(d_model=1024, d_ff=2816, num_heads=16), "xl": dict(d_model=2048, d_ff=5120, num_heads=32),
            "xxl": dict(d_model=4096, d_ff=10240, num_heads=64)}
_NEOX = dict(rotary_pct=0.25, max_position_embeddings=2048, vocab_size=50304, tie_word_embeddings=False)
# (transformers config class, its values, the real tokenizer's length): google/flan-t5-{large,xl,xxl} and
# google/t5-{large,xl,xxl}-lm-adapt (T5 v1.1, 24+24 layers, 32100 tokens); Salesforce/codet5p-770m-py (T5-large,
# ReLU); lmsys/longchat-13b-16k (LLaMA-13B, linear RoPE x8); gpt2, gpt2-xl; EleutherAI/pythia-160m, -1.4b
# (GPT-NeoX tokenizer, 50277 tokens); bigscience/bloom-1b1 (250680 tokens)
ARCH: dict[str, tuple[str, dict[str, Any], int]] = {
    **{f"{p}{s}{q}": ("T5Config", {**_T5, **T5_SIZES[s], "num_layers": 24, "num_decoder_layers": 24}, 32100)
       for s in T5_SIZES for p, q in (("flan-t5-", ""), ("t5-", "-lm"))},
    "codet5p-770m-py": ("T5Config", dict(d_model=1024, d_ff=4096, d_kv=64, num_heads=16, num_layers=24,
                                         num_decoder_layers=24, vocab_size=32100, feed_forward_proj="relu"), 32100),
    "longchat-13b-16k": ("LlamaConfig", dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                                             num_attention_heads=40, num_key_value_heads=40, vocab_size=32000,
                                             max_position_embeddings=16384, rms_norm_eps=1e-6,
                                             rope_scaling={"rope_type": "linear", "factor": 8.0}), 32000),
    "gpt2": ("GPT2Config", dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257), 50257),
    "gpt2-xl": ("GPT2Config", dict(n_embd=1600, n_layer=48, n_head=25, n_positions=1024, vocab_size=50257), 50257),
    "pythia-160m": ("GPTNeoXConfig", dict(_NEOX, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                          intermediate_size=3072), 50277),
    "pythia-1.4b": ("GPTNeoXConfig", dict(_NEOX, hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
                                          intermediate_size=8192), 50277),
    "bloom-1b1": ("BloomConfig", dict(hidden_size=1536, n_layer=24, n_head=16, vocab_size=250880), 250680),
}
SMOKE_DIMS = {"T5Config": dict(d_model=32, d_ff=64, d_kv=16, num_heads=2, num_layers=2, num_decoder_layers=2),
              "LlamaConfig": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  num_key_value_heads=2),
              "GPT2Config": dict(n_embd=32, n_layer=2, n_head=2, n_positions=32),
              "GPTNeoXConfig": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
              "BloomConfig": dict(hidden_size=32, n_layer=2, n_head=2)}
MINI_OF_FAMILY = {"t5": "mini-t5", "gpt2": "mini-gpt2", "gpt_neox": "mini-pythia", "bloom": "mini-bloom",
                  "llama": "mini-gpt2"}  # whose tokenizer (padded) and special ids a random model takes


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def entry(name: str) -> dict[str, Any]:
    """Paper model ``name``'s conf/model entry (family, l_tr, params)."""
    return _yaml(CONF / "model" / f"{name}.yaml")


def size(name: str) -> float:
    """Parameters of paper model ``name`` as its conf/model entry states them (``params: 11.3B``)."""
    label = str(entry(name).get("params", "0"))
    return float(label.rstrip("BM")) * (1e9 if label.endswith("B") else 1e6 if label.endswith("M") else 1)


def model_config(name: str, smoke: bool = False) -> Any:
    """The transformers config of paper model ``name`` (tiny dimensions with ``smoke``), with the special ids of
    the mini whose tokenizer it takes."""
    import transformers

    cls, values, _ = ARCH[name]
    mini = json.loads((CKPT / MINI_OF_FAMILY[entry(name)["family"]] / "config.json").read_text())
    ids = {k: mini[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
           if mini.get(k) is not None}
    return getattr(transformers, cls)(**{**values, **(SMOKE_DIMS[cls] if smoke else {}), **ids})


def parameters(name: str) -> int:
    """Parameters of paper model ``name`` at its real configuration (built on the meta device)."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    cfg = model_config(name)
    with torch.device("meta"):
        model = (AutoModelForSeq2SeqLM if cfg.is_encoder_decoder else AutoModelForCausalLM).from_config(cfg)
    return sum(p.numel() for p in model.parameters())


def arch_key(name: str) -> str:
    """One name for the models of one configuration, tokenizer and family (their directory is shared)."""
    return hashlib.sha1(json.dumps([entry(name)["family"], ARCH[name]], sort_keys=True).encode()).hexdigest()[:12]


def padded_tokenizer(mini: Path, size: int, out: Path) -> None:
    """``mini``'s tokenizer files with the model's vocabulary grown to ``size`` entries by pieces no text produces
    (BPE: no merge makes them; Unigram: scored far below any real piece), written into ``out``."""
    data = json.loads((mini / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    start = len(vocab) + sum(t["id"] >= len(vocab) for t in data.get("added_tokens", []))
    extra = [f"<unused_{i}>" for i in range(start, size)]
    if isinstance(vocab, dict):
        vocab.update({t: len(vocab) for t in extra})
    else:
        vocab.extend([t, -1e4] for t in extra)
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    shutil.copy(mini / "tokenizer_config.json", out / "tokenizer_config.json")


def build_dir(name: str, out: Path, device: torch.device, smoke: bool) -> dict[str, Any]:
    """A ``save_pretrained`` directory of ``name`` with random weights (bf16 on a GPU) and its padded tokenizer."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    t0 = time.monotonic()
    cfg = model_config(name, smoke)
    torch.manual_seed(0)
    with torch.device(device):
        model = (AutoModelForSeq2SeqLM if cfg.is_encoder_decoder else AutoModelForCausalLM).from_config(
            cfg, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out)
    del model
    padded_tokenizer(CKPT / MINI_OF_FAMILY[entry(name)["family"]], ARCH[name][2], out)
    return {"params": n, "build_s": round(time.monotonic() - t0, 1)}
