"""Prompting and decoding a loaded model: tokenised batches (right padding for encoders, left for
decoder-only generation), greedy generation, chat templates, and the first-line stopping rule of next-line
code completion (paper A §5.4).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from lengthx.models.loading import LoadedModel

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger("lengthx")


def chat_prompt(template: str, prompt: str, model: str) -> str:
    """``prompt`` wrapped in a model's chat template (``model.chat_template``, with one ``{prompt}``).

    Paper A Table 4's LongChat row: LongEval prompts LongChat-13B-16K in FastChat's vicuna conversation
    format, the system line "A chat between a curious user and an artificial intelligence assistant. ..."
    followed by "USER: {prompt} ASSISTANT:" (``conf/model/longchat-13b-16k.yaml``)."""
    if template.count("{prompt}") != 1:
        raise ValueError(f"model.chat_template of model '{model}' must contain '{{prompt}}' exactly once, got "
                         f"{template!r}; e.g. model.chat_template='USER: {{prompt}} ASSISTANT:'")
    return template.replace("{prompt}", prompt)


def encode(loaded: LoadedModel, prompts: list[str]) -> dict[str, torch.Tensor]:
    """Tokenise a batch (right padding for encoders, left padding for decoder-only generation)."""
    tok = loaded.tokenizer
    tok.padding_side = "right" if loaded.family.encoder_decoder else "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    batch = tok(prompts, return_tensors="pt", padding=True)
    return {k: v.to(loaded.device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}


class FirstLineDone:
    """A ``generate`` stopping criterion: a sequence is done once its new text holds a newline, for tasks scored on
    the text before the first newline only (next-line code completion, paper A §5.4, as LongCoder's evaluation
    cuts it). The score is the same as with the full ``max_new_tokens``; decoding stops sooner."""

    def __init__(self, tokenizer, prompt_length: int):
        self.tokenizer, self.prompt_length = tokenizer, prompt_length

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_length:], skip_special_tokens=True)
        done = ["\n" in t for t in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def whitespace_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Ids of the tokens that decode to whitespace only (``▁``, ``\\n``, a BPE run of spaces, ...)."""
    cached = getattr(tokenizer, "_lengthx_whitespace_ids", None)
    if cached is None:
        # decode each token after an anchor token: a lone "▁" decodes to "" (SentencePiece drops a leading space)
        anchor = tokenizer("a", add_special_tokens=False)["input_ids"][-1]
        base = tokenizer.decode([anchor])
        ids = sorted(set(tokenizer.get_vocab().values()) - set(tokenizer.all_special_ids))
        texts = tokenizer.batch_decode([[anchor, i] for i in ids])
        cached = [i for i, t in zip(ids, texts, strict=True)
                  if t.startswith(base) and t[len(base):] and not t[len(base):].strip()]
        tokenizer._lengthx_whitespace_ids = cached
    return cached


def check_generates(loaded: LoadedModel, where: str) -> None:
    """One greedy token from a one-token input, so that a model that cannot generate (an encoder-decoder whose
    config names no ``decoder_start_token_id``) stops the run at once with the fix, before Algorithm 1 or any cell
    spends minutes on it. Raises :class:`lengthx.models.loading.ModelNotAvailable` naming ``where``."""
    from lengthx.models.loading import ModelNotAvailable

    tok = loaded.tokenizer
    first = tok.eos_token_id if tok.eos_token_id is not None else 0
    ids = torch.tensor([[first]], device=loaded.device)
    try:
        with torch.no_grad():
            loaded.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=1,
                                  do_sample=False, num_beams=1)
    except ValueError as err:
        fix = (" Fix: set decoder_start_token_id in its config.json and generation_config.json (T5: the pad id, 0)"
               if "decoder_start_token_id" in str(err) else "")
        raise ModelNotAvailable(f"{where} cannot generate: {' '.join(str(err).split())}{fix}") from None


def generate(loaded: LoadedModel, prompts: list[str], max_new_tokens: int, first_line: bool = False,
             start_with_text: bool = False) -> list[str]:
    """Greedy decoding; returns only the newly generated text (up to its first complete line when
    ``first_line``; with ``start_with_text`` the first token may not be whitespace only)."""
    from transformers import StoppingCriteriaList

    batch = encode(loaded, prompts)
    prompt_length = 0 if loaded.family.encoder_decoder else batch["input_ids"].shape[1]
    stop = StoppingCriteriaList([FirstLineDone(loaded.tokenizer, prompt_length)]) if first_line else None
    extra = {"begin_suppress_tokens": whitespace_token_ids(loaded.tokenizer)} if start_with_text else {}
    with torch.no_grad():
        out = loaded.model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                                    pad_token_id=loaded.tokenizer.pad_token_id, stopping_criteria=stop, **extra)
    if not loaded.family.encoder_decoder:
        out = out[:, prompt_length:]
    return loaded.tokenizer.batch_decode(out, skip_special_tokens=True)
