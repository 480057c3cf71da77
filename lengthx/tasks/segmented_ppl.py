"""Perplexity at L_t, 2L_t, 4L_t (… 5L_t) for paper B's Tables 2-5 and Figure 2 (paper B §4.5, §5.1).

Protocol (paper B §4.1, §4.5; docs/design.md §5): held-out documents are cut into non-overlapping sequences of the
evaluation length L (remainder dropped, one document per sequence, no packing); every sequence is scored
whole, with no sliding window: ppl(x) = exp(−(1/n) Σ_i log p(x_i | x_<i)) over its n = L − 1 predicted
tokens (eq. 3). A cell reports the **mean of the per-sequence perplexities** (``ppl``, the paper's number)
and the **token-weighted perplexity** exp(Σ NLL / Σ n) (``ppl_tokens``).

Settings are multiples of the model's L_t (``task.factors``; labels ``L_t``, ``2L_t``, …). An APE model
(GPT-2) evaluated beyond its table is linearly interpolated to the evaluation length first (§3.2, the
out-of-the-box extension of §5.1), always from the checkpoint's own table. RoPE and ALiBi need nothing.

Method ids in results: a stock model is ``ootb``; a checkpoint written by ``lengthx train`` carries its
training label (``lengthx_train.json``), suffixed ``@<β>L_t`` when it was trained to L_e = βL_t > L_t
(``chunk-0.25@4L_t``), so Table 3's "chunk-0.25, 4L_t" cell is the 4L_t-trained model at 4L_t.
``task.method_label=`` overrides the id. Paper B's OOTB models are the checkpoints after one epoch of domain
adaptation (§4.3): ``lengthx train method=da label=ootb``; a stock model is also reported as ``ootb``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import open_dict
from tqdm.auto import tqdm

from lengthx.tasks.base import Setting

log = logging.getLogger("lengthx")

TASK_NAME = "segmented_ppl"
METRICS = ("ppl", "ppl_tokens")
LOGIT_BLOCK = 1024  # rows of logits materialised at once (vocab × block floats)


def factor_label(factor: float) -> str:
    """``1`` → ``L_t``, ``2`` → ``2L_t``, ``2.5`` → ``2.5L_t``."""
    return "L_t" if factor == 1 else f"{factor:g}L_t"


def resolve_settings(task_cfg: Any, l_t: int) -> list[Setting]:
    """Evaluation lengths: ``task.settings`` in tokens if given, else ``task.factors`` × L_t."""
    explicit = task_cfg.get("settings")
    if explicit:
        out = []
        for v in explicit:
            v = int(v)
            label = factor_label(v / l_t) if v % l_t == 0 or (2 * v) % l_t == 0 else str(v)
            out.append(Setting(label, v, "tokens"))
        return out
    factors = task_cfg.get("factors") or [1, 2, 4]
    return [Setting(factor_label(float(f)), int(round(float(f) * l_t)), "tokens") for f in factors]


def method_label(model_cfg: Any, l_t: int) -> str:
    """``ootb`` for a stock model; a trained checkpoint's label, with ``@βL_t`` when L_e > L_t."""
    from lengthx.training import source_meta

    meta = source_meta(model_cfg)
    if not meta:
        return "ootb"
    label = str(meta.get("label") or meta.get("method"))
    l_e = int(meta.get("l_e") or l_t)
    return label if l_e <= l_t else f"{label}@{factor_label(l_e / l_t)}"


def _checkpoint_fingerprint(model_cfg: Any) -> str:
    """What identifies the scored weights: the training run's hash and steps, and the weight files themselves."""
    from lengthx.models.loading import weights_fingerprint
    from lengthx.training import source_meta

    meta = source_meta(model_cfg)
    run = f"{meta.get('config_hash', '')}:{meta.get('steps', '')}" if meta else ""
    return f"{run}:{weights_fingerprint(model_cfg.get('path'))}"


# ---- scoring --------------------------------------------------------------------------------------------
@torch.no_grad()
def sequence_nll(model: torch.nn.Module, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed next-token NLL and number of predictions of each row of ``input_ids`` (B, L), no window.

    The body runs once over the whole sequence (positions 0…L−1, an all-ones mask); logits are formed
    ``LOGIT_BLOCK`` rows at a time in fp32 so a long sequence with a large vocabulary fits in memory.
    """
    from lengthx.segmented_models import base_model

    body, head = base_model(model), model.get_output_embeddings()
    mask = torch.ones_like(input_ids)
    hidden = body(input_ids=input_ids, attention_mask=mask, use_cache=False).last_hidden_state
    nll = torch.zeros(input_ids.shape[0], dtype=torch.float64, device=input_ids.device)
    length = input_ids.shape[1]
    for s in range(0, length - 1, LOGIT_BLOCK):
        e = min(length - 1, s + LOGIT_BLOCK)
        logits = head(hidden[:, s:e]).float()
        ce = torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), input_ids[:, s + 1 : e + 1], reduction="none"
        )
        nll += ce.double().sum(-1)
    return nll, torch.full_like(nll, length - 1)


@torch.no_grad()
def median_attention_past(model: torch.nn.Module, input_ids: torch.Tensor, l_t: int) -> torch.Tensor:
    """Figure 3's statistic: the median attention weight of every query at a position ≥ L_t.

    For each layer, head, batch row and query q ≥ L_t, the median of its causal attention distribution over
    keys 0…q (paper B §6: medians far below the mean 1/(q+1) mean a few keys take most of the weight; after
    segmented training they rise and spread). Returns a flat float tensor, ready for a histogram. The model
    runs once with eager attention (switched temporarily; attention probabilities are not exposed by SDPA).
    """
    before = getattr(model.config, "_attn_implementation", None)
    switch = before not in (None, "eager") and hasattr(model, "set_attn_implementation")
    if switch:
        model.set_attn_implementation("eager")
    try:
        out = model(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            output_attentions=True,
            use_cache=False,
        )
    finally:
        if switch:
            model.set_attn_implementation(before)
    medians = []
    length = input_ids.shape[1]
    for probs in out.attentions:  # (B, H, L, L)
        for q in range(l_t, length):
            medians.append(probs[:, :, q, : q + 1].float().median(dim=-1).values.reshape(-1))
    if not medians:
        raise ValueError(f"no query at a position ≥ L_t={l_t} in a sequence of {length} tokens")
    return torch.cat(medians).cpu()


@dataclass
class LengthState:
    """Keeps a GPT-2's own position table so every evaluation length interpolates from it."""

    family: str
    original_wpe: torch.Tensor | None = None

    @classmethod
    def capture(cls, model: torch.nn.Module, family: str) -> LengthState:
        from lengthx.segmented_models import base_model

        wpe = base_model(model).wpe.weight.detach().clone() if family == "gpt2" else None
        return cls(family, wpe)

    def set_length(self, model: torch.nn.Module, length: int) -> str:
        """Make ``model`` accept ``length`` tokens; returns a note on what was done ('' if nothing)."""
        from lengthx.positions import interpolate_ape
        from lengthx.segmented_models import base_model, extend_rope

        if self.family == "gpt2" and self.original_wpe is not None:
            body, n0 = base_model(model), self.original_wpe.shape[0]
            table = self.original_wpe if length <= n0 else interpolate_ape(self.original_wpe, length)
            if body.wpe.num_embeddings != table.shape[0]:
                body.wpe = torch.nn.Embedding.from_pretrained(table.clone(), freeze=True)
            else:
                with torch.no_grad():
                    body.wpe.weight.copy_(table)
            model.config.n_positions = table.shape[0]
            return f"APE interpolated {n0}->{length}" if length > n0 else ""
        if self.family == "gpt_neox":
            extend_rope(model, length)
        return ""


class SegmentedPPLTask:
    """Paper B's perplexity task: test sequences of a length, scored whole."""

    name = TASK_NAME
    metrics = METRICS
    max_new_tokens = 0

    def __init__(self, task_cfg: Any, profile: str = "mini", ref_length: int | None = None):
        self.cfg = task_cfg
        self.profile = profile
        self.ref_length = ref_length

    def sequences(self, tokenizer: Any, length: int, n: int | None) -> list[tuple[str, torch.Tensor]]:
        """The first ``n`` (all when None) held-out ``length``-token sequences, in a fixed order.

        With ``ref_length`` (``task.text_factor`` × L_t) every length scores the same text instead: ``n``
        held-out ``ref_length``-token pieces drawn at random (seeded by ``task.seed``), each cut into
        ⌊ref_length / length⌋ consecutive ``length``-token sequences, so perplexities at different lengths
        differ only by context and position, not by which files happen to be long enough.
        """
        from lengthx.training import piece_dataset

        if self.ref_length and self.ref_length > length:
            return [
                (f"{sid}/{j}", ids[j * length : (j + 1) * length])
                for sid, ids in self.sequences(tokenizer, self.ref_length, n)
                for j in range(self.ref_length // length)
            ]
        pieces = piece_dataset(
            self.cfg.data, tokenizer, str(self.cfg.get("split") or "test"), length, self.profile
        )
        if self.ref_length and n is not None and int(n) < len(pieces):
            pick = torch.randperm(len(pieces), generator=torch.Generator().manual_seed(int(self.cfg.get("seed", 0))))
            rows = pieces.select(sorted(pick[: int(n)].tolist()))
            return [(f"{r['doc_id']}#{int(r['piece'])}", r["input_ids"].long()) for r in rows]
        count = len(pieces) if n is None else min(int(n), len(pieces))
        if count == 0:
            raise ValueError(
                f"no held-out document is at least {length} tokens long; add data (data.files=…, "
                "data.max_docs) or evaluate shorter lengths (task.factors)"
            )
        rows = pieces.select(range(count))
        return [(f"{r['doc_id']}#{int(r['piece'])}", r["input_ids"].long()) for r in rows]


def _token_hash(ids: torch.Tensor) -> str:
    return hashlib.sha256(ids.to(torch.int64).cpu().numpy().tobytes()).hexdigest()[:16]


def score_cell(
    loaded: Any,
    task: SegmentedPPLTask,
    setting: Setting,
    store: Any,
    cell_key: str,
    n: int | None,
    batch_size: int,
    lengths: LengthState,
    chash: str,
) -> dict[str, Any]:
    """Score one setting, resuming from (and appending to) the cell's records; returns metrics and counts.

    A record is reused only if it scored the same tokens under the same cell hash ``chash`` (which covers the
    weights), so a retrained checkpoint at the same path never inherits its predecessor's losses.
    """
    note = lengths.set_length(loaded.model, setting.value)
    seqs = task.sequences(loaded.tokenizer, setting.value, n)
    done = store.load_records(cell_key)
    results: dict[str, tuple[float, int]] = {}
    todo = []
    for sid, ids in seqs:
        rec = done.get(sid)
        if rec is not None and rec.get("prompt_hash") == _token_hash(ids) and rec.get("config_hash") == chash:
            results[sid] = (float(rec["scores"]["nll"]), int(rec["scores"]["tokens"]))
        else:
            todo.append((sid, ids))
    bar = tqdm(total=len(seqs), initial=len(results), desc=cell_key, unit="seq", leave=False)
    for i in range(0, len(todo), max(1, batch_size)):
        chunk = todo[i : i + batch_size]
        ids = torch.stack([t for _, t in chunk]).to(loaded.device)
        nll, cnt = sequence_nll(loaded.model, ids)
        for (sid, row), s, c in zip(chunk, nll.tolist(), cnt.tolist(), strict=True):
            results[sid] = (s, int(c))
            store.append_record(
                cell_key,
                {
                    "id": sid,
                    "prompt_hash": _token_hash(row),
                    "config_hash": chash,
                    "target": None,
                    "output": None,
                    "scores": {"nll": s, "tokens": int(c), "ppl": math.exp(s / c)},
                    "requested_tokens": setting.value,
                    "actual_tokens": int(row.numel()),
                    "meta": {"note": note},
                },
            )
        bar.update(len(chunk))
        ppls = [math.exp(s / c) for s, c in results.values()]
        bar.set_postfix(ppl=f"{sum(ppls) / len(ppls):.3f}")
    bar.close()
    mean_ppl, tok_ppl = perplexities([results[sid] for sid, _ in seqs])
    return {"ppl": mean_ppl, "ppl_tokens": tok_ppl, "n": len(seqs), "note": note}


def perplexities(scored: list[tuple[float, int]]) -> tuple[float, float]:
    """(mean of per-sequence perplexities, token-weighted perplexity) of (summed NLL, predicted tokens) pairs."""
    mean_ppl = sum(math.exp(s / c) for s, c in scored) / len(scored)
    return mean_ppl, math.exp(sum(s for s, _ in scored) / sum(c for _, c in scored))


def run_task(cfg: Any, loaded: Any = None) -> list[dict[str, Any]]:
    """``lengthx run task=segmented_ppl``: every setting of one model into the results store.

    Same contract as :meth:`lengthx.runner.Runner.run`: a finished cell is skipped, an interrupted one
    resumes from its per-sequence records, an OOM or error becomes a status row and the sweep goes on.
    Returns one summary dict per cell (``cell``, ``status``, ``value`` = mean perplexity).
    """
    from lengthx.models.loading import load_model
    from lengthx.results import ResultsStore, git_commit, now, versions
    from lengthx.runner import cell_hash
    from lengthx.segmented_models import check_family
    from lengthx.training import RUNS_DIR

    if cfg.method.name != "none":
        raise ValueError(
            "task=segmented_ppl scores a model as it is: use method=none, and pick a trained "
            "checkpoint with model.path=DIR (its training method is read from lengthx_train.json)"
        )
    check_family(str(cfg.model.family))
    store = ResultsStore(Path(cfg.results_dir))
    profile = str(cfg.profile.name)
    if cfg.task.get("run"):  # a `lengthx train` run of this model, by its directory name
        final = RUNS_DIR / profile / str(cfg.model.name) / str(cfg.task.run) / "final"
        if not (final / "config.json").is_file():
            raise ValueError(
                f"task.run={cfg.task.run}: no finished training run at {final}; train it first "
                f"(lengthx train model={cfg.model.name} method=… l_e_factor=…) or pass model.path=DIR"
            )
        with open_dict(cfg.model):
            cfg.model.path = str(final)
    l_t = int(cfg.task.get("l_t") or cfg.model.l_tr)
    text_factor = cfg.task.get("text_factor")
    task = SegmentedPPLTask(cfg.task, profile, int(round(float(text_factor) * l_t)) if text_factor else None)
    method = str(cfg.task.get("method_label") or method_label(cfg.model, l_t))
    fingerprint = _checkpoint_fingerprint(cfg.model)
    n = cfg.task.get("num_examples") or cfg.profile.get("num_examples") or cfg.task.get("paper_num_examples")
    n = int(n) if n else None
    lengths: LengthState | None = None
    summary = []
    for setting in resolve_settings(cfg.task, l_t):
        key = f"{cfg.model.name}|{method}|{TASK_NAME}|{setting.label}"
        chash = cell_hash(cfg, setting, fingerprint)
        if store.is_done(key, chash):
            log.info("skip finished cell %s", key)
            summary.append({"cell": key, "status": "done"})
            continue
        start = time.time()
        base = {
            "paper": cfg.task.get("paper", "B"),
            "table": cfg.get("table") or cfg.task.get("table"),
            "model": cfg.model.name,
            "method": method,
            "task": TASK_NAME,
            "setting": setting.label,
            "L_tr": l_t,
            "L_req": setting.value,
            "L_ex": setting.value,
            "seed": cfg.task.get("seed", 0),
            "cell": key,
            "config_hash": chash,
            "git_commit": git_commit(),
            "versions": versions(),
            "timestamp": now(),
        }
        try:
            if loaded is None:
                loaded = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
            if lengths is None:
                lengths = LengthState.capture(loaded.model, str(cfg.model.family))
            res = score_cell(loaded, task, setting, store, key, n, int(cfg.get("batch_size") or 1), lengths,
                             chash)
            rows = [
                {
                    **base,
                    "metric": m,
                    "value": round(res[m], 4),
                    "n": res["n"],
                    "status": "ok",
                    "message": res["note"],
                    "device": str(loaded.device),
                    "seconds": round(time.time() - start, 2),
                }
                for m in METRICS
            ]
            status = "ok"
        except (torch.OutOfMemoryError, MemoryError) as err:
            rows, status = [_status_row(base, "oom", err, start)], "oom"
        except Exception as err:  # one failing cell must not sink the sweep
            if type(err).__name__ == "ModelNotAvailable":
                raise
            log.error("cell %s failed: %s: %s (recorded as a status row)", key, type(err).__name__, err)
            rows, status = [_status_row(base, "error", err, start)], "error"
        store.append_rows(rows, key, chash)
        summary.append(
            {"cell": key, "status": status, **({"value": rows[0]["value"]} if status == "ok" else {})}
        )
        if status != "ok" and torch.cuda.is_available():
            torch.cuda.empty_cache()
    k = int(cfg.task.get("attention_medians") or 0)
    hist_file = Path(cfg.results_dir) / "attention" / f"{cfg.model.name}__{method}.json"
    if k > 0 and (not hist_file.is_file() or json.loads(hist_file.read_text()).get("fingerprint") != fingerprint):
        # Figure 3's data (again when the scored weights changed)
        if loaded is None:
            loaded = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
        if lengths is None:
            lengths = LengthState.capture(loaded.model, str(cfg.model.family))
        factor = float(cfg.task.get("attention_factor") or 4)
        at = Setting(factor_label(factor), int(round(factor * l_t)), "tokens")
        hist = attention_histogram(loaded, task, at, l_t, k, lengths)
        hist.update({"model": str(cfg.model.name), "method": method, "l_t": l_t, "fingerprint": fingerprint})
        hist_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = hist_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(hist))
        os.replace(tmp, hist_file)
    return summary


MEDIAN_BINS = torch.linspace(-7.0, 0.0, 57)  # log10 edges of Figure 3's histogram


def attention_histogram(
    loaded: Any, task: SegmentedPPLTask, setting: Setting, l_t: int, k: int, lengths: LengthState
) -> dict[str, Any]:
    """Histogram of log10 median attention weights of queries past L_t over ``k`` held-out sequences.

    Paper B Figure 3 (§6): values below 10⁻⁷ fall in the first bin. Also records the median of the medians
    and that of the uniform weight 1/(q+1) over the same queries, for reference.
    """
    lengths.set_length(loaded.model, setting.value)
    meds = torch.cat([
        median_attention_past(loaded.model, ids.unsqueeze(0).to(loaded.device), l_t)
        for _, ids in task.sequences(loaded.tokenizer, setting.value, k)
    ])
    logs = meds.clamp_min(1e-7).log10().clamp(max=0.0)
    counts = torch.histogram(logs, bins=MEDIAN_BINS).hist
    uniform = 1.0 / torch.arange(l_t + 1, setting.value + 1, dtype=torch.float64)
    return {
        "setting": setting.label,
        "length": setting.value,
        "sequences": k,
        "log10_edges": [round(float(e), 4) for e in MEDIAN_BINS],
        "counts": [int(c) for c in counts],
        "median": float(meds.median()),
        "uniform_median": float(uniform.median()),
    }


def _status_row(base: dict[str, Any], status: str, err: BaseException, start: float) -> dict[str, Any]:
    return {
        **base,
        "metric": METRICS[0],
        "value": "",
        "n": 0,
        "status": status,
        "message": f"{type(err).__name__}: {err}"[:500],
        "seconds": round(time.time() - start, 2),
    }
