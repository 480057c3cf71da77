"""Small tokenizers trained locally (no hub access), for the mini checkpoints.

:func:`train_tokenizer` is T5-like (mini-T5, paper A); :func:`train_bpe_tokenizer` is GPT-2-like (the
decoder-only minis of paper B: byte-level BPE, one ``<|endoftext|>`` token, no special tokens added).

The tokenizer mimics T5's SentencePiece conventions where the harness relies on them: a Unigram model over
``▁``-marked words, ``<pad>`` = 0 (also the decoder start token), ``</s>`` = 1 appended to every encoded
sequence, ``<unk>`` = 2, and optional ``<extra_id_*>`` sentinels. It departs from T5 on purpose in one way:
runs of digits are cut into groups of at most ``digit_group`` digits from the left *before* the Unigram
model sees them (``31415`` -> ``314`` ``15``), and every group of up to ``digit_group`` digits is forced
into the vocabulary. A number of 1..50000 (passkey keys, LongEval values) is then one or two tokens that
always tokenize the same way, which a small encoder-decoder copies far more easily than digit by digit.
Newlines are kept as their own tokens (T5 collapses them) so that line-structured prompts keep their shape,
and punctuation is split off words, so that a word tokenizes the same way before ``:`` as before ``?``
(a LongEval line index must look the same in its line and in the question).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Iterator

from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE, Unigram
from tokenizers.trainers import BpeTrainer, UnigramTrainer
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
SPACE = "\u2581"  # "▁", SentencePiece's word-boundary marker


def digit_pieces(digit_group: int) -> list[str]:
    """Every string of 1..``digit_group`` digits (leading zeros included): the number pieces."""
    return ["".join(p) for n in range(1, digit_group + 1) for p in itertools.product("0123456789", repeat=n)]


def _number_text(digit_group: int, repeats: int, seed: int = 0) -> Iterator[str]:
    """Lines that contain every number piece ``repeats`` times, so the trainer scores them as frequent."""
    pieces = digit_pieces(digit_group)
    rng = random.Random(seed)
    for _ in range(repeats):
        rng.shuffle(pieces)
        for i in range(0, len(pieces), 32):
            yield " ".join(pieces[i : i + 32])


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 8000,
    *,
    digit_group: int = 3,
    extra_ids: int = 0,
    max_piece_length: int = 16,
    model_max_length: int = 1_000_000,
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a T5-like Unigram tokenizer on ``texts`` and wrap it for ``transformers``.

    Args:
        texts: training text (any iterable of strings; read once).
        vocab_size: target vocabulary size, special tokens included.
        digit_group: digits are split into groups of at most this many from the left; all groups of
            1..``digit_group`` digits are guaranteed single tokens. ``0`` disables digit splitting.
        extra_ids: number of T5 sentinel tokens ``<extra_id_0>`` … appended at the end of the vocabulary.
        max_piece_length: longest piece the Unigram trainer may create.
        model_max_length: the wrapper's nominal maximum length (no truncation is applied by default).
        show_progress: show the trainer's progress bars.

    Returns:
        A ``PreTrainedTokenizerFast`` with pad 0, eos 1, unk 2, eos appended by its post-processor, that
        ``save_pretrained(dir)`` writes and ``AutoTokenizer.from_pretrained(dir)`` loads offline.
    """
    special = [PAD, EOS, UNK]
    tok = Tokenizer(Unigram())
    tok.normalizer = normalizers.NFKC()
    steps: list[pre_tokenizers.PreTokenizer] = [
        pre_tokenizers.Split("\n", behavior="isolated"),
        pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="first", split=True),
        pre_tokenizers.Split(Regex(rf"[^\w\s{SPACE}]"), behavior="isolated"),
    ]
    if digit_group > 0:
        steps.append(pre_tokenizers.Split(Regex(rf"\d{{1,{digit_group}}}"), behavior="isolated"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.Metaspace(replacement=SPACE, prepend_scheme="first", split=True)

    forced = digit_pieces(digit_group) if digit_group > 0 else []
    trainer = UnigramTrainer(
        vocab_size=vocab_size - extra_ids,
        special_tokens=special,
        unk_token=UNK,
        max_piece_length=max(max_piece_length, digit_group),
        initial_alphabet=list("0123456789\n" + SPACE),
        show_progress=show_progress,
    )
    corpus = itertools.chain(texts, _number_text(digit_group, 20) if forced else ())
    tok.train_from_iterator(corpus, trainer=trainer)
    if forced:
        missing = [p for p in forced if tok.token_to_id(p) is None]
        if missing:
            tok = _with_pieces(tok, missing)

    if extra_ids:
        tok.add_special_tokens([f"<extra_id_{i}>" for i in range(extra_ids)])
    eos_id = tok.token_to_id(EOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}", special_tokens=[(EOS, eos_id)]
    )
    if (tok.token_to_id(PAD), eos_id, tok.token_to_id(UNK)) != (0, 1, 2):
        raise RuntimeError("special tokens must have ids pad=0, eos=1, unk=2")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        additional_special_tokens=[f"<extra_id_{i}>" for i in range(extra_ids)] or None,
        model_max_length=model_max_length,
        padding_side="right",
    )


def _with_pieces(tok: Tokenizer, pieces: list[str]) -> Tokenizer:
    """A copy of the Unigram ``tok`` whose vocabulary also holds ``pieces`` (scored like its best pieces
    so that the Viterbi segmentation prefers them), replacing the same number of its rarest pieces."""
    import json

    spec = json.loads(tok.to_str())
    vocab: list[list[str | float]] = spec["model"]["vocab"]
    n_special = 3
    specials, rest = vocab[:n_special], vocab[n_special:]
    rest.sort(key=lambda item: float(item[1]), reverse=True)
    keep = rest[: max(0, len(rest) - len(pieces))]
    top_score = float(keep[0][1]) if keep else 0.0
    spec["model"]["vocab"] = specials + [[p, top_score] for p in pieces] + keep
    return Tokenizer.from_str(json.dumps(spec))


def is_single_token(tokenizer: PreTrainedTokenizerFast, piece: str) -> bool:
    """Whether ``piece`` written right after a non-digit, non-space character (as in ``<31415>``) comes
    out as exactly one token of ``tokenizer``."""
    ids = tokenizer("<" + piece, add_special_tokens=False)["input_ids"]
    return bool(ids) and tokenizer.convert_ids_to_tokens(ids[-1]) == piece


ENDOFTEXT = "<|endoftext|>"


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int = 4096) -> PreTrainedTokenizerFast:
    """Train a GPT-2-style byte-level BPE on ``texts`` (read once) and wrap it for ``transformers``.

    As GPT-2's: every byte is in the base alphabet (no unknown token), whitespace runs and newlines are kept
    (code keeps its indentation), ``<|endoftext|>`` (id 0) is bos, eos and pad, and encoding adds nothing.
    """
    tok = Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[ENDOFTEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.token_to_id(ENDOFTEXT) != 0:
        raise RuntimeError(f"{ENDOFTEXT} must have id 0")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=ENDOFTEXT,
        eos_token=ENDOFTEXT,
        pad_token=ENDOFTEXT,
        unk_token=None,
        model_max_length=1_000_000,
    )
