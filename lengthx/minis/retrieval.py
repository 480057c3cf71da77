"""The retrieval stand-in's recipe (mini-t5, docs/mini-t5-study.md): a small T5 with learned relative position
buckets that retrieves by key at its training length, trained from scratch offline on the one loop of
:mod:`lengthx.minis.loop`.

Paper A's largest effects are on retrieval (§5.2, Table 4): LongEval lines and topics, passkey. Its phenomenon
only shows on a T5 that solves them at L_tr, hence this recipe:

* **Data** (:mod:`lengthx.minis.retrieval_data`): each batch mixes the tasks in fixed shares.
* **Curriculum with gates.** Lines records start with 1 line and get one more only when the teacher-forced exact
  match of the examples with the current number of lines reaches ``--gate`` over ``--gate-window`` of them; after
  the last count that fits L_tr comes the full stage. If the 2-line gate has not passed after ``--gate-minutes``,
  training stops (NO-GO). With ``--w-lines 0`` there is no lines curriculum and no gate.
* **Curve.** Every ``--log-every`` steps: loss and teacher-forced EM per task, EM per number of lines, the stage
  and the throughput; every ``--eval-every`` steps, greedy-decoding EM on held-out examples at L_tr.
* **Schedule.** Warm-up, flat, linear decay over the last ``--decay-frac`` of the box (``--max-steps``, or
  ``--max-minutes`` when set); ``--stop-step`` stops early on the same schedule (retrains one snapshot exactly).
* **Snapshots and export.** ``--export-steps`` writes an fp16 snapshot with its card (held-out EM at L_tr of the
  exported weights) at those step counts; the end of a run exports ``OUT/export`` (and ``--export``) with its
  card and ``curve.json`` (the final held-out EM at each ``--final-lengths``).

Entry point: ``python scripts/train_mini_t5.py`` (its ``--help`` lists every option).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

from lengthx.minis.curriculum import Curriculum
from lengthx.minis.export import export_fp16
from lengthx.minis.lookup_data import form_capacity
from lengthx.minis.loop import Box, TrainingLoop, log
from lengthx.minis.retrieval_args import lookup_forms, parse_args
from lengthx.minis.retrieval_card import (
    card_counts,
    card_fill_lines,
    card_lines,
    model_card,
    retrieval_bar,
    trained_tasks,
)
from lengthx.minis.retrieval_data import TASKS, Mixture
from lengthx.minis.retrieval_eval import exact_match, held_out
from lengthx.tasks.token_ids import IGNORE, IdBatch


def build_model(args: argparse.Namespace, tok: PreTrainedTokenizerFast) -> T5ForConditionalGeneration:
    """A randomly initialised T5 (from torch's global generator) of the recipe's shape, dropout off; with
    ``--init-from``, that checkpoint's weights (its shape must be the recipe's)."""
    config = T5Config(
        vocab_size=len(tok), d_model=args.d_model, d_kv=args.d_kv, d_ff=args.d_ff, num_layers=args.enc_layers,
        num_decoder_layers=args.dec_layers, num_heads=args.heads, relative_attention_num_buckets=32,
        relative_attention_max_distance=args.max_distance, dropout_rate=0.0, feed_forward_proj=args.ff_proj,
        tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
    )
    model = T5ForConditionalGeneration(config)
    if getattr(args, "init_from", None) is not None:
        start = T5ForConditionalGeneration.from_pretrained(str(args.init_from), dtype=torch.float32,
                                                           trust_remote_code=False)
        shape = ("d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads", "vocab_size",
                 "relative_attention_max_distance", "feed_forward_proj")
        differ = [k for k in shape if getattr(start.config, k) != getattr(config, k)]
        if differ:
            raise SystemExit(f"--init-from {args.init_from}: its {', '.join(differ)} differ from the recipe's. Fix: "
                             "the recipe's shape options as that checkpoint's config.json has them")
        model.load_state_dict(start.state_dict())
    model.generation_config.decoder_start_token_id = tok.pad_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model


def teacher_forced(model: torch.nn.Module, batch: IdBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example mean token cross-entropy, and whether every answer token is the argmax (exactly when greedy
    decoding would produce the answer)."""
    labels = batch.labels
    dec_in = labels.new_zeros(labels.shape)  # decoder start = pad = 0
    dec_in[:, 1:] = labels[:, :-1].clamp(min=0)
    on = torch.device(batch.input_ids.device).type
    with torch.autocast(on, dtype=torch.bfloat16, enabled=on == "cuda"):
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, decoder_input_ids=dec_in).logits
    mask = labels != IGNORE
    tok_loss = F.cross_entropy(logits.float().transpose(1, 2), labels, ignore_index=IGNORE, reduction="none")
    loss = (tok_loss * mask).sum(1) / mask.sum(1).clamp(min=1)
    exact = ((logits.argmax(-1) == labels) | ~mask).all(1)
    return loss, exact


def lr_at(step: int, progress: float, args: argparse.Namespace) -> float:
    """Warm-up, flat, then linear decay to zero over the last ``decay_frac`` of the run's progress; ``step``
    counts from the optimizer's start (a resume from ``resume.pt`` warms up again)."""
    warm = min(1.0, (step + 1) / max(1, args.warmup))
    tail = 1.0 if progress < 1 - args.decay_frac else max(0.0, (1 - progress) / args.decay_frac)
    return args.lr * warm * tail


def restore_generator(gen: torch.Generator, saved: torch.Tensor, seed: int, step: int) -> bool:
    """Set the data generator ``gen`` to its saved state; True when it continues the saved stream.

    A state saved by another device's generator (a CPU run resumed on CUDA, or back: docs/gpu.md, "The lookup
    study on a GPU") does not fit this one, and the two devices' streams differ anyway: the generator is then
    seeded from (``seed``, ``step``), so the resumed run draws fresh examples, the same ones on every rerun of it,
    and the log says so. Returns False then."""
    if saved.numel() == gen.get_state().numel():
        gen.set_state(saved)
        return True
    gen.manual_seed(seed * 1_000_003 + step)
    log(f"the saved data generator is another device's ({saved.numel()} bytes of state, this {gen.device.type} "
        f"one's {gen.get_state().numel()}): examples from here on are drawn from seed {seed} at step {step}")
    return False


class RetrievalRecipe:
    """mini-t5 on :class:`lengthx.minis.loop.TrainingLoop`: the mixture, the curriculum, the curve, snapshots."""

    def __init__(self, args: argparse.Namespace, tok: PreTrainedTokenizerFast, device: torch.device, hardware: str,
                 command: str) -> None:
        self.args, self.tok, self.device, self.hardware, self.command = args, tok, device, hardware, command
        torch.manual_seed(args.seed)
        t0 = time.time()
        self.mix = Mixture(tok, args, device)
        forms = lookup_forms(args)  # a form before the last ends at what its records hold (lengthx.minis.curriculum)
        self.curriculum = Curriculum(self.mix.gens["lines"].capacity(), args.gate, args.gate_window, device, forms,
                                     {f: form_capacity(tok, args.l_tr, f, args.lines_format) for f in forms[:-1]})
        log(f"token-id tables built in {time.time() - t0:.1f}s; lines capacity {self.curriculum.capacities} at L_tr "
            f"{args.l_tr}; passkey filler up to {self.mix.gens['passkey'].max_garbage} chars; shares {self.mix.sizes}")
        self.model = build_model(args, tok).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01,
                                           fused=device.type == "cuda")
        self.gen = torch.Generator(device=device).manual_seed(args.seed)
        self.fwd = torch.compile(self.model) if args.compile else self.model
        self.export_steps = {int(x) for x in args.export_steps.split(",") if x.strip()}
        self.eval_sets: dict[str, Any] = {}
        self._window()

    def _window(self) -> None:
        """Zero the running sums of the curve's next row (on the device: no synchronisation per step)."""
        zeros = lambda n: torch.zeros(n, device=self.device)  # noqa: E731
        self.window = {"loss": zeros(3), "exact": zeros(3), "n": zeros(3), "lines_exact": zeros(64),
                       "lines_n": zeros(64), "multi_exact": zeros(64), "multi_n": zeros(64), "t": time.time(),
                       "examples": 0}

    # ------------------------------------------------------------------------------------- the Recipe
    def lr(self, loop: TrainingLoop) -> float:
        return lr_at(loop.step - int(loop.state.get("optimizer_fresh_at", 0)), loop.progress, self.args)

    def loss(self, step: int) -> torch.Tensor:
        batch, task, n_lines, multi = self.mix.batch(step, self.curriculum.lines_count, self.gen, self.curriculum.form)
        loss, exact = teacher_forced(self.fwd, batch)
        self._last = (task, n_lines, loss.detach(), exact, multi)
        return loss.mean()

    def state_parts(self) -> dict[str, Any]:
        return {"curriculum": self.curriculum.state_dict(), "generator": self.gen.get_state()}

    def load_state_parts(self, saved: dict[str, Any]) -> None:
        try:
            self.curriculum.load_state_dict(saved["curriculum"])
        except ValueError as e:
            raise SystemExit(f"{self.args.out}: {e}") from None
        restore_generator(self.gen, saved["generator"], self.args.seed, int((saved.get("state") or {}).get("step", 0)))

    def after_step(self, loop: TrainingLoop) -> None:
        args, state, w = self.args, loop.state, self.window
        task, n_lines, loss, exact, multi = self._last
        state["examples"] += len(task)
        w["examples"] += len(task)
        with torch.no_grad():
            for key, value in (("loss", loss), ("exact", exact.float()), ("n", torch.ones_like(loss))):
                w[key].index_add_(0, task, value)
            lines_rows = (task == TASKS.index("lines")) & ~multi  # single-question records: the benchmark's
            multi_rows = (task == TASKS.index("lines")) & multi
            n_lines = n_lines.clamp(max=63)
            for key, rows in (("lines", lines_rows), ("multi", multi_rows)):
                w[f"{key}_exact"].index_add_(0, n_lines[rows], exact[rows].float())
                w[f"{key}_n"].index_add_(0, n_lines[rows], torch.ones_like(loss[rows]))
        self.curriculum.update(n_lines[lines_rows], exact[lines_rows])
        if loop.step % 25 == 0 and self.curriculum.advance(loop.step):
            stage = "full records" if self.curriculum.full else self.curriculum.stage
            form = f" in the {self.curriculum.form} form" if len(self.curriculum.forms) > 1 else ""
            log(f"gate passed at step {loop.step}: now {stage} lines{form}")
        if ("lines" in self.mix.sizes and args.gate_minutes > 0 and loop.minutes > args.gate_minutes
                and self.curriculum.stage <= 2):
            state["stopped"] = f"NO-GO: the {self.curriculum.stage}-line gate did not pass in {args.gate_minutes} minutes"
            log(state["stopped"])
        if loop.step % args.log_every == 0 or state["stopped"]:
            self._log_row(loop)
        if loop.step in self.export_steps and not (self.snapshot_dir(loop.step) / "README.md").exists():
            loop.save()
            with loop.untimed():
                export_fp16(self.model, self.tok, self.snapshot_dir(loop.step))
                final = self.finish(loop, self.snapshot_dir(loop.step), [args.l_tr], also=[])
            if args.stop_at_gate and retrieval_bar(args, final)[1]:
                state["stopped"] = f"the snapshot at step {loop.step} meets the bar at L_tr (--stop-at-gate)"
                log(state["stopped"])

    def _log_row(self, loop: TrainingLoop) -> None:
        w = self.window
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        n = w["n"].clamp(min=1)
        row: dict[str, Any] = {
            "step": loop.step, "minutes": round(loop.minutes, 3), "stage": self.curriculum.stage,
            **({"form": self.curriculum.form} if len(self.curriculum.forms) > 1 else {}),
            "examples_per_s": round(w["examples"] / max(time.time() - w["t"], 1e-9), 1),
            **{f"loss_{t}": round(v, 4) for t, v in zip(TASKS, (w["loss"] / n).tolist(), strict=True)},
            **{f"em_{t}": round(v, 4) for t, v in zip(TASKS, (w["exact"] / n).tolist(), strict=True)},
            "em_by_lines": {k: round(e / c, 3) for k, (e, c) in
                            enumerate(zip(w["lines_exact"].tolist(), w["lines_n"].tolist(), strict=True)) if c > 0},
        }
        if self.mix.lookup is not None:  # multi-query records: EM of the whole target, by lines kept
            row["em_multi_by_lines"] = {k: round(e / c, 3) for k, (e, c) in enumerate(
                zip(w["multi_exact"].tolist(), w["multi_n"].tolist(), strict=True)) if c > 0}
        if loop.step % self.args.eval_every == 0:
            with loop.untimed():  # evaluation time is not training time
                row["held_out"] = exact_match(self.model, self.tok, self.eval_sets)
        loop.state["curve"].append(row)
        log(" ".join(f"{k} {v}" for k, v in row.items()))
        self._window()

    # --------------------------------------------------------------------------------------- export
    def snapshot_dir(self, step: int) -> Path:
        """Where the snapshot exported at ``step`` lives (``--export-steps``)."""
        return (self.args.snapshots_to or self.args.out / "snapshots") / f"step-{step:05d}"

    def finish(self, loop: TrainingLoop, exported: Path, lengths: list[int], also: list[Path]) -> dict[str, float]:
        """Held-out EM of the exported fp16 weights in ``exported`` at each of ``lengths`` (the trained tasks);
        model card and curve beside them, and copies in ``also``. Returns the held-out EM by set."""
        args, tok, state = self.args, self.tok, loop.state
        model = T5ForConditionalGeneration.from_pretrained(str(exported), dtype=torch.float32,
                                                          trust_remote_code=False).to(self.device).eval()
        final: dict[str, float] = {}
        for length in lengths:
            sets = held_out(tok, length, args.final_n, args.final_seed, trained_tasks(args), args.topics_format,
                            card_counts(args) if length == args.l_tr else (), args.lines_format,
                            card_lines(args) if length == args.l_tr else (),
                            card_fill_lines(args) if length == args.l_tr else ())
            for name, value in exact_match(model, tok, sets).items():
                final[f"{name}@{length}"] = value
            log(f"final @ {length}: " + ", ".join(f"{k} {v:.0f}%" for k, v in final.items() if k.endswith(f"@{length}")))
        seconds = max(state["train_seconds"], 1e-9)
        summary = {"l_tr": args.l_tr, "steps": loop.step, "train_minutes": seconds / 60, "hardware": self.hardware,
                   "examples_per_s": state["examples"] / seconds, "command": self.command,
                   "stage": self.curriculum.stage, "gates": self.curriculum.gates(), "stopped": state["stopped"],
                   "final": final, "curve": state["curve"]}
        card = model_card(args, model, summary)
        for target in [exported, *also]:
            if target != exported:
                export_fp16(model, tok, target)
            (target / "curve.json").write_text(json.dumps(summary, indent=1))
            (target / "README.md").write_text(card)  # last: a snapshot with a card is complete
            log(f"exported to {target}")
        return final


def main(argv: list[str] | None = None) -> int:
    """Train (or resume) mini-t5 as ``argv`` says (``scripts/train_mini_t5.py``'s options)."""
    args = parse_args(argv)
    command = "python scripts/train_mini_t5.py " + " ".join(sys.argv[1:] if argv is None else argv)
    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)"
    args.out.mkdir(parents=True, exist_ok=True)
    if not (args.tokenizer / "tokenizer.json").exists():
        raise SystemExit(f"--tokenizer {args.tokenizer} has no tokenizer.json; pass the directory of a tokenizer "
                         "trained by lengthx.data.tokenizers.train_tokenizer (e.g. lengthx/checkpoints/mini-t5)")
    tok = AutoTokenizer.from_pretrained(str(args.tokenizer), trust_remote_code=False)
    recipe = RetrievalRecipe(args, tok, device, hardware, command)
    box = Box(args.max_steps, args.max_minutes, args.stop_step, save_every_minutes=args.save_every_minutes,
              portable=args.portable_state)
    loop = TrainingLoop(args.out, recipe.model, recipe.optimizer, recipe, box,
                        {"step": 0, "train_seconds": 0.0, "examples": 0, "curve": [], "stopped": None},
                        seconds_key="train_seconds")
    if loop.resume():
        log(f"curriculum stage {recipe.curriculum.stage}")
    log(f"device {hardware}; {sum(p.numel() for p in recipe.model.parameters()) / 1e6:.2f}M parameters")
    recipe.eval_sets = held_out(tok, args.l_tr, args.eval_n, args.eval_seed, trained_tasks(args), args.topics_format,
                                card_counts(args), args.lines_format, card_lines(args), card_fill_lines(args))
    loop.run()
    export_fp16(recipe.model, tok, args.out / "export")
    log(f"stopped at step {loop.step}, {loop.minutes:.1f} min: {loop.state['stopped'] or 'time or step box'}")
    lengths = [int(x) for x in args.final_lengths.split(",") if x]
    recipe.finish(loop, args.out / "export", lengths, also=[args.export] if args.export is not None else [])
    return 0
