"""Multi-document question answering (Lost in the Middle, Liu et al. 2023), paper A §5.3 / Tables 5, 14.

Benchmark facts (docs/design.md §6, §10): the prompt is

    Write a high-quality answer for the given question using only the provided search results (some of
    which might be irrelevant).\\n\\n
    Document [1](Title: t) text\\nDocument [2](Title: t) text ...\\n\\nQuestion: q\\nAnswer:

with documents numbered from 1; data are NaturalQuestions-Open questions with 10, 20 or 30 retrieved
Wikipedia passages of which one (the gold document) holds the answer, placed at position 0, 4, 9, ... (the
upstream files ``nq-open-{N}_total_documents_gold_at_{i}.jsonl.gz``, fields ``question``, ``answers`` and
``ctxs`` with ``title``, ``text``, ``isgold``); the score is best-subspan exact match
(:func:`lengthx.tasks.metrics.best_subspan_em`).

Data: ``task.data_dir`` (a directory holding upstream files, directly or in upstream's
``{N}_total_documents/`` folders, or one ``.jsonl``/``.jsonl.gz`` file with the same fields); the paper
profile needs it (a run without it stops before any model loads, naming the file). The documents of a setting "N docs, gold at i" are the gold document and the first N-1
non-gold ``ctxs`` in file order, with the gold one inserted at position i; on an upstream
``..._gold_at_{i}`` file of N documents this reproduces its exact document order. Offline, a generated QA
set in the same schema (:func:`generate_records`, the mini profile's default; its rows say
``data=generated``): fictional towns whose gold document states the asked
fact, distractors stating the same kind of fact about other towns, or other facts about the same town.

Settings: labels ``"{N}docs@{i}"``. Unit ``docs`` (the paper's: natural length) or ``tokens``: the N
documents keep their structure and the gold document stays whole, while the distractors' texts are cut
(words shared out evenly) so that the prompt has the requested token count. A ``tokens`` setting whose
label names no structure (e.g. Algorithm 1's reference at L_tr) uses as many documents as fit whole plus
one cut to size, the gold one at a seeded position.
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lengthx.data.fitting import bisect_largest, count_tokens, fit_to_tokens
from lengthx.data.jsonl import DataFormatError, read_jsonl
from lengthx.data.provenance import GENERATED, file_label
from lengthx.tasks.base import Example, Setting, Task, draw_items, missing_path
from lengthx.tasks.metrics import best_subspan_em

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

INSTRUCTION = (
    "Write a high-quality answer for the given question using only the provided search results "
    "(some of which might be irrelevant).\n\n"
)
DOCUMENT = "Document [{i}](Title: {title}) {text}"
QUESTION = "\n\nQuestion: {question}\nAnswer:"
CLOSED_BOOK = "Question: {question}\nAnswer:"
UPSTREAM_FILE = "nq-open-{n}_total_documents_gold_at_{gold}.jsonl.gz"
PAPER_DATA = ("Lost in the Middle's NQ-Open files nq-open-{N}_total_documents_gold_at_{i}.jsonl.gz "
              "(github.com/nelson-liu/lost-in-the-middle, qa_data/{N}_total_documents/)")
_LABEL = re.compile(r"^(\d+)docs@(\d+)$")


@dataclass(frozen=True)
class Document:
    """One retrieved passage."""

    title: str
    text: str


@dataclass(frozen=True)
class QARecord:
    """A question, its gold answers, the gold document and the distractors in retrieval order."""

    question: str
    answers: tuple[str, ...]
    gold: Document
    distractors: tuple[Document, ...]
    source: str = ""

    def documents(self, n_docs: int, gold_at: int) -> list[Document]:
        """``n_docs`` documents: the first ``n_docs - 1`` distractors with the gold one at ``gold_at``."""
        if not 0 <= gold_at < n_docs:
            raise ValueError(f"gold position {gold_at} is outside 0..{n_docs - 1}")
        if len(self.distractors) < n_docs - 1:
            raise ValueError(f"{self.source or 'record'} has {len(self.distractors)} distractors, "
                             f"{n_docs - 1} needed")
        docs = list(self.distractors[: n_docs - 1])
        docs.insert(gold_at, self.gold)
        return docs


def mdqa_prompt(question: str, documents: list[Document]) -> str:
    """The Lost-in-the-Middle multi-document QA prompt (documents numbered from 1)."""
    docs = "\n".join(DOCUMENT.format(i=i, title=d.title, text=d.text) for i, d in enumerate(documents, 1))
    return INSTRUCTION + docs + QUESTION.format(question=question)


def closedbook_prompt(question: str) -> str:
    """The closed-book variant (no documents)."""
    return CLOSED_BOOK.format(question=question)


def parse_label(label: str) -> tuple[int, int] | None:
    """``"20docs@14"`` → (20, 14); ``None`` for labels that name no document structure."""
    m = _LABEL.match(label)
    return (int(m.group(1)), int(m.group(2))) if m else None


# ---- reading data ----------------------------------------------------------------------------------------


def read_records(path: str | Path) -> list[QARecord]:
    """QA records from an upstream ``.jsonl.gz`` (or any ``.jsonl``) file; a malformed line fails with the
    file, the line and the missing field (``ctxs[3].isgold`` for a document's field)."""
    path = Path(path)
    rows = read_jsonl(path, {"question": str, "answers": list, "ctxs": list})
    out = []
    for row in rows:
        where = f"{path}, line {row['_line']}"
        docs, gold = [], None
        for k, ctx in enumerate(row["ctxs"]):
            if not isinstance(ctx, dict):
                raise DataFormatError(f"{where}: ctxs[{k}] is not an object")
            for name in ("title", "text", "isgold"):
                if name not in ctx:
                    raise DataFormatError(f"{where}: missing field 'ctxs[{k}].{name}'")
            doc = Document(str(ctx["title"]), str(ctx["text"]))
            if ctx["isgold"] and gold is None:
                gold = doc
            else:
                docs.append(doc)
        if gold is None:
            raise DataFormatError(f"{where}: no document has isgold true")
        if not all(isinstance(a, str) for a in row["answers"]):
            raise DataFormatError(f"{where}: field 'answers' should be a list of strings")
        out.append(QARecord(row["question"], tuple(row["answers"]), gold, tuple(docs), where))
    return out


def find_data_file(data_dir: str | Path, n_docs: int, gold_at: int) -> Path:
    """The file to read for a setting: the upstream file of exactly (N, i) (in ``data_dir`` or its
    ``{N}_total_documents/`` folder), else an upstream file with at least N documents, else the first
    ``*.jsonl[.gz]`` file that is not an upstream one; ``data_dir`` may itself be a file."""
    base = Path(data_dir)
    if base.is_file():
        return base
    if not base.is_dir():
        raise FileNotFoundError(f"task.data_dir={base} is neither a directory nor a file")
    for folder in (base, base / f"{n_docs}_total_documents"):  # upstream keeps each N in its own folder
        for name in (UPSTREAM_FILE.format(n=n_docs, gold=gold_at),
                     UPSTREAM_FILE.format(n=n_docs, gold=gold_at).removesuffix(".gz")):
            if (folder / name).is_file():
                return folder / name
    upstream = []
    for p in [*base.glob("nq-open-*_total_documents_gold_at_*.jsonl*"),
              *base.glob("*_total_documents/nq-open-*_total_documents_gold_at_*.jsonl*")]:
        m = re.match(r"nq-open-(\d+)_total_documents", p.name)
        if m and int(m.group(1)) >= n_docs:
            upstream.append((int(m.group(1)), p.name, p))
    if upstream:
        return sorted(upstream)[0][2]
    files = [p for p in sorted(base.glob("*.jsonl")) + sorted(base.glob("*.jsonl.gz"))
             if not p.name.startswith("nq-open-")]  # an upstream file with fewer documents cannot serve N
    if not files:
        raise FileNotFoundError(f"no {UPSTREAM_FILE.format(n=n_docs, gold=gold_at)} nor any .jsonl[.gz] file "
                                f"in task.data_dir={base}")
    return files[0]


# ---- offline QA set (our own templates) --------------------------------------------------------------

_SYL_A = ("bar", "cal", "dor", "el", "fen", "gal", "hol", "ist", "kar", "lon", "mer", "nor", "or", "pel",
          "quin", "ros", "sal", "tor", "ul", "val", "wen", "yar", "zel", "bren", "cor", "dun")
_SYL_B = ("a", "e", "i", "o", "u", "ia", "ea", "io")
_SYL_C = ("by", "dale", "ford", "gate", "ham", "holm", "mont", "mouth", "port", "ridge", "stead", "ton",
          "vale", "wick", "burg", "field")
_GIVEN = ("Ada", "Bram", "Celia", "Dorian", "Elsa", "Fergus", "Greta", "Hugo", "Ilse", "Jonas", "Klara",
          "Lucan", "Mira", "Nils", "Odile", "Piet", "Rosa", "Silas", "Tilda", "Viggo")
_FAMILY = ("Ambrel", "Brightwater", "Corvane", "Dellmoor", "Eastlake", "Fairholt", "Greyson", "Holloway",
           "Ivers", "Jantzen", "Kessler", "Lindqvist", "Marchetti", "Norwood", "Ostrander", "Pellham",
           "Quarrie", "Rendell", "Stavros", "Thorne")
_RIVERS = ("Amber", "Blackwater", "Coldbrook", "Dawnrush", "Elder", "Foxrun", "Glimmer", "Hazel", "Ironvein",
           "Juniper", "Kestrel", "Larkspur", "Millrace", "Nettle", "Otterflow", "Pinewash", "Quickwater",
           "Redfern", "Silverlee", "Thistle")
_EXPORTS = ("wool blankets", "copper wire", "goat cheese", "glass beads", "oak barrels", "dried apricots",
            "wind turbines", "clay tiles", "linen thread", "salted fish", "violin strings", "paper lanterns",
            "rye whisky", "leather saddles", "olive soap", "tin toys", "honey cakes", "rope ladders")
_FESTIVALS = ("Lantern Night", "the Harvest of Bells", "Blue Kite Day", "the Salt Parade", "Moonbread Week",
              "the Festival of Masks", "Ember Sunday", "the River Regatta", "Orchard Fair", "Frost Carnival")

# attribute: (question template, fact sentence template, value pool)
_ATTRIBUTES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "river": ("which river flows through the town of {town}", "The {value} River flows through {town}.",
              _RIVERS),
    "founder": ("who founded the town of {town}", "{town} was founded by {value}.", ()),
    "year": ("in what year was the town of {town} founded", "{town} was founded in {value}.", ()),
    "export": ("what is the main export of {town}", "The main export of {town} is {value}.", _EXPORTS),
    "festival": ("what festival is held every summer in {town}", "Every summer {town} holds {value}.",
                 _FESTIVALS),
}
_FILLER = (
    "{town} lies in a quiet valley surrounded by low hills and farmland.",
    "The town has a small market square with a stone fountain at its center.",
    "Its population grew slowly during the nineteenth century as new roads were built.",
    "Most residents work in trade, farming or small workshops.",
    "A narrow railway line connects {town} with the neighboring villages.",
    "The old town hall, rebuilt after a fire, now houses a local museum.",
    "Visitors often mention the long footpaths along the fields and woods.",
    "The climate is mild, with wet winters and warm, dry summers.",
    "{town} has a primary school, a library and a weekly newspaper.",
    "Several historic houses in {town} are protected as monuments.",
    "The surrounding region is known for its orchards and vineyards.",
    "A regional bus service runs through {town} several times a day.",
    "The parish church of {town} dates back several centuries.",
    "Local crafts include weaving, carpentry and pottery.",
)


def _town(rng: random.Random) -> str:
    return (rng.choice(_SYL_A) + rng.choice(_SYL_B) + rng.choice(_SYL_C)).capitalize()


def _value(attr: str, rng: random.Random) -> str:
    pool = _ATTRIBUTES[attr][2]
    if attr == "founder":
        return f"{rng.choice(_GIVEN)} {rng.choice(_FAMILY)}"
    if attr == "year":
        return str(rng.randint(1100, 1899))
    return rng.choice(pool)


def _document(town: str, facts: list[str], rng: random.Random, n_filler: int) -> Document:
    sentences = [s.format(town=town) for s in rng.sample(_FILLER, n_filler)]
    for fact in facts:
        sentences.insert(rng.randint(0, min(2, len(sentences))), fact)
    return Document(town, " ".join(sentences))


def generate_record(rng: random.Random, n_distractors: int = 29) -> QARecord:
    """One generated question in the Lost-in-the-Middle schema. The gold document (about town T) states
    the asked fact; distractors state the same kind of fact about other towns, or (two of them) other
    facts about T itself, so neither the title nor the sentence pattern alone finds the answer.

    The gold document is short (its facts and one or two other sentences, ~40 words) because it is never
    cut; distractors are long (~120 words) with their facts among the first sentences, so token fitting
    (which cuts distractors from the end) can reach any requested length and keeps their facts."""
    attr = rng.choice(list(_ATTRIBUTES))
    question_t, fact_t, _ = _ATTRIBUTES[attr]
    towns: list[str] = []
    while len(towns) < n_distractors + 1:
        t = _town(rng)
        if t not in towns:
            towns.append(t)
    town = towns[0]
    answer = _value(attr, rng)
    other_attrs = [a for a in _ATTRIBUTES if a != attr]
    gold_facts = [fact_t.format(town=town, value=answer)] + [
        _ATTRIBUTES[a][1].format(town=town, value=_value(a, rng)) for a in rng.sample(other_attrs, 1)]
    gold = _document(town, gold_facts, rng, rng.randint(1, 2))
    distractors = []
    for k in range(n_distractors):
        if k < 2:  # same town, other facts
            facts = [_ATTRIBUTES[a][1].format(town=town, value=_value(a, rng)) for a in rng.sample(other_attrs, 2)]
            distractors.append(_document(town, facts, rng, rng.randint(8, 11)))
        else:  # other town, same kind of fact with another value
            other, value = towns[k - 1], _value(attr, rng)
            while value == answer:
                value = _value(attr, rng)
            distractors.append(_document(other, [fact_t.format(town=other, value=value)], rng,
                                         rng.randint(8, 11)))
    rng.shuffle(distractors)
    return QARecord(question_t.format(town=town), (answer,), gold, tuple(distractors), "generated")


@lru_cache(maxsize=4)
def generate_records(n: int, seed: int = 0, n_distractors: int = 29) -> tuple[QARecord, ...]:
    """``n`` generated records (seeded): the offline stand-in for the NQ-Open files."""
    rng = random.Random(f"mdqa-generated:{seed}")
    return tuple(generate_record(rng, n_distractors) for _ in range(n))


def _water_fill(lengths: list[int], budget: int) -> list[int]:
    """Share ``budget`` words among documents as evenly as their lengths allow (monotone in budget)."""
    if budget >= sum(lengths):
        return list(lengths)

    def used(level: int) -> int:
        return sum(min(n, level) for n in lengths)

    level = bisect_largest(lambda k: used(k) <= budget, 0, max(lengths))  # all of max(lengths) exceeds the budget
    alloc = [min(n, level) for n in lengths]
    rest = budget - sum(alloc)
    for j, n in enumerate(lengths):
        if rest == 0:
            break
        if n > alloc[j]:
            alloc[j] += 1
            rest -= 1
    return alloc


class MDQATask(Task):
    """Lost-in-the-Middle multi-document QA: N documents with the gold one at position i, best-subspan EM."""

    name = "mdqa"
    metrics = ("accuracy",)
    units = ("docs", "tokens")  # what task.unit may name (the unit of explicit task.settings)
    calibration_item = "record"  # meta key of an example's question (lengthx.tasks.base.CALIBRATION_RESERVE)
    paper_data = PAPER_DATA
    stand_in = {GENERATED: "a QA set generated from lengthx's templates (fictional towns)"}

    def __init__(self, max_new_tokens: int = 100, data_dir: str | None = None, generated_records: int = 500):
        self.max_new_tokens = max_new_tokens
        self.data_dir = data_dir
        self.generated_records = generated_records
        self._cache: dict[Path, list[QARecord]] = {}

    @classmethod
    def from_config(cls, task_cfg: Any, profile: str = "mini") -> MDQATask:
        """The task from its Hydra config (``conf/task/mdqa.yaml``); the paper profile needs the real files."""
        if profile == "paper" and not task_cfg.get("data_dir"):
            raise ValueError(cls.data_problem(task_cfg, profile))
        return cls(max_new_tokens=int(task_cfg.max_new_tokens), data_dir=task_cfg.get("data_dir"),
                   generated_records=int(task_cfg.get("generated_records", 500)))

    @staticmethod
    def data_problem(task_cfg: Any, profile: str, settings: list[Setting] | None = None) -> str | None:
        """Why this config cannot read the question file of each of ``settings``, or ``None``. The paper
        profile must have ``task.data_dir`` (the generated QA set is the mini profile's stand-in only)."""
        data_dir = task_cfg.get("data_dir")
        if not data_dir:
            if profile != "paper":
                return None
            first = next((parse_label(s.label) for s in settings or [] if parse_label(s.label)), (10, 0))
            return (f"task=mdqa in profile=paper reads {PAPER_DATA}; task.data_dir is not set, so "
                    f"{UPSTREAM_FILE.format(n=first[0], gold=first[1])} (and the other settings' files) is missing. "
                    "Fix: download them and pass task.data_dir=DIR (the generated QA set is the mini profile's "
                    "stand-in, never the paper profile's)")
        problem = missing_path("task.data_dir", data_dir, PAPER_DATA)
        if problem:
            return problem
        for setting in settings or []:
            n_docs, gold_at = parse_label(setting.label) or (30, 0)
            try:
                find_data_file(data_dir, n_docs, gold_at)
            except FileNotFoundError:
                return (f"task.data_dir={data_dir} has no {UPSTREAM_FILE.format(n=n_docs, gold=gold_at)} (setting "
                        f"{setting.label}) nor a file with more documents. Fix: add it from {PAPER_DATA}")
        return None

    def data_source(self, setting: Setting) -> str:
        """The question file a setting reads (name and hash), or ``generated`` (lengthx.data.provenance)."""
        if not self.data_dir:
            return GENERATED
        return file_label(find_data_file(self.data_dir, *(self.structure(setting) or (30, 0))))

    def records(self, n_docs: int, gold_at: int) -> list[QARecord] | tuple[QARecord, ...]:
        """The records a setting draws from: the data file's, or the generated set."""
        if not self.data_dir:
            return generate_records(self.generated_records, 0, max(29, n_docs - 1))
        path = find_data_file(self.data_dir, n_docs, gold_at)
        if path not in self._cache:
            self._cache[path] = read_records(path)
        return self._cache[path]

    def structure(self, setting: Setting) -> tuple[int, int] | None:
        """(N documents, gold position) of a setting, from its label (or its value for unit ``docs``)."""
        parsed = parse_label(setting.label)
        if parsed is None and setting.unit == "docs":
            parsed = (setting.value, 0)
        if parsed is not None and setting.unit == "docs" and parsed[0] != setting.value:
            raise ValueError(f"setting {setting.label} says {parsed[0]} documents but its value is {setting.value}")
        return parsed

    def examples(self, setting: Setting, tokenizer: PreTrainedTokenizerBase, n: int, seed: int, exclude: Collection[int] = (),
                 reserve: int = 0) -> list[Example]:
        """``n`` seeded questions at ``setting`` (the same questions at every setting of one data set).

        Questions in ``exclude`` (record indices, ``meta["record"]``) are never drawn: Algorithm 1's calibration
        questions exclude the evaluation's. ``reserve``: when ``n`` asks for every question, that many are left
        out for calibration (:func:`lengthx.tasks.base.draw_items`)."""
        if setting.unit not in ("docs", "tokens"):
            raise ValueError(f"mdqa settings are in docs or tokens, not {setting.unit!r}")
        struct = self.structure(setting)
        records = self.records(*(struct or (30, 0)))
        excluded = set(exclude)
        pool = [i for i in range(len(records)) if i not in excluded]
        picked = draw_items(pool, n, reserve, f"mdqa:reserve:{seed}", f"mdqa:{seed}")
        out = []
        for k, idx in enumerate(picked):
            rec = records[idx]
            if struct is None:  # tokens setting with no structure in its label
                prompt, n_docs, gold_at = self._fit_unstructured(rec, tokenizer, setting.value, seed, k)
            else:
                n_docs, gold_at = struct
                docs = rec.documents(n_docs, gold_at)
                prompt = mdqa_prompt(rec.question, docs) if setting.unit == "docs" else \
                    self._fit(rec.question, docs, gold_at, tokenizer, setting.value)
            requested = setting.value if setting.unit == "tokens" else None
            out.append(Example(f"{seed}-{k}", prompt, list(rec.answers), requested, count_tokens(tokenizer, prompt),
                               {"n_docs": n_docs, "gold_at": gold_at, "record": idx,
                                "source": rec.source, "question": rec.question}))
        return out

    @staticmethod
    def _fit(question: str, docs: list[Document], gold_at: int, tokenizer, target: int) -> str:
        """The prompt with the distractors cut (gold whole) to at most ``target`` tokens."""
        words = [d.text.split() for d in docs]
        others = [j for j in range(len(docs)) if j != gold_at]
        lengths = [len(words[j]) for j in others]

        def build(budget: int) -> str:
            alloc = dict(zip(others, _water_fill(lengths, budget), strict=True))
            cut = [d if j == gold_at else Document(d.title, " ".join(words[j][: alloc[j]]))
                   for j, d in enumerate(docs)]
            return mdqa_prompt(question, cut)

        total = sum(lengths)
        full = build(total)
        if count_tokens(tokenizer, full) <= target:
            return full  # the documents are shorter than requested: natural length (recorded)
        try:
            return fit_to_tokens(build, tokenizer, target, hi=total)[1]
        except ValueError as err:
            raise ValueError(f"mdqa: {len(docs)} documents with the gold one whole do not fit in {target} "
                             f"tokens ({err})") from None

    def _fit_unstructured(self, rec: QARecord, tokenizer, target: int, seed: int, k: int) -> tuple[str, int, int]:
        """As many documents as fit whole (gold at a seeded position) plus one cut to size."""
        rng = random.Random(f"mdqa-unstructured:{seed}:{k}")
        max_docs = len(rec.distractors) + 1

        def whole(m: int) -> int:
            return count_tokens(tokenizer, mdqa_prompt(rec.question, rec.documents(m, 0)))

        m = 1
        while m < max_docs and whole(m + 1) <= target:
            m += 1
        n_docs = min(m + 1, max_docs)
        gold_at = rng.randrange(n_docs)
        docs = rec.documents(n_docs, gold_at)
        return self._fit(rec.question, docs, gold_at, tokenizer, target), n_docs, gold_at

    def score(self, output: str, example: Example) -> dict[str, float]:
        """100 × best-subspan EM of the output against the gold answers."""
        return {"accuracy": 100.0 * best_subspan_em(output, example.target)}
