"""Topic retrieval (LongEval "topics", Li et al. 2023), paper A §5.2 / Table 4.

Benchmark facts (docs/design.md §10, verbatim): a header saying the record holds a conversation on N topics, each
opening with "USER: I would like to discuss the topic of <TOPIC>", the conversations one after another, and
the question. As LongEval's current test-case generator builds them, the conversations are concatenated with
nothing between them (a conversation ends "... let's talk about the next topic." and the next begins
"USER: ..." right after the full stop), and the question reads "What is the first topic(s) we discussed? Only
give me the topic name. Do not summarize yourself." Upstream used 50 cases per setting (5, 10, 15, 20, 25
topics), topics drawn without replacement.

Conversations come from LongEval's ``conversations.jsonl`` (one JSON object per line with string fields
``topic`` and ``conversation``) when ``task.conversations_path`` names it; the paper profile needs it (a run
without it stops before any model loads). The mini profile generates them from our own templates
(:func:`generate_conversations`), each opening with the benchmark's sentence, and its rows say
``data=generated``.

Scoring: upstream asked a GPT model to judge whether the output names the first topic. Offline we use a
documented rule, :func:`lengthx.tasks.metrics.topic_correct`: the SQuAD-normalised topic (lower case, no
punctuation, no articles, single spaces) must occur as a whole run of words in the normalised output.

``task.testcases_dir`` evaluates LongEval's released test cases instead, their prompts byte for byte
(:mod:`lengthx.tasks.longeval_testcases`); rows then name the file.

Settings: ``topics`` (N full conversations, the paper's unit) or ``tokens``: the record is then the
seeded sequence of conversations cut at a word boundary so that the prompt has the requested token count
(bisection with the model's tokenizer); the last conversation may be cut short, and N in the header counts
the conversations that the record contains (the last one possibly partial), as recorded in ``meta``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lengthx.data.fitting import count_tokens, fit_to_tokens
from lengthx.data.jsonl import read_jsonl
from lengthx.data.provenance import GENERATED, file_label
from lengthx.tasks.base import Example, Setting, Task, count_knob_problem, missing_path
from lengthx.tasks.longeval_testcases import read_testcases, testcase_path, testcases_problem
from lengthx.tasks.metrics import topic_correct
from lengthx.tasks.topics_records import count_fits, fixed_count_record, minimal_tokens

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

HEADER = (
    "Below is a record of our previous conversation on {n} different topics. You are the ASSISTANT, and I "
    "am the USER. At the beginning of each topic, the USER will say 'I would like to discuss the topic of "
    "<TOPIC>'. Memorize each <TOPIC>. At the end of the record, I will ask you to retrieve the first topic. "
    "Now the record start. "
)
CLOSING = (
    " Now the record ends. What is the first topic(s) we discussed? Only give me the topic name. "
    "Do not summarize yourself."
)
OPENER = "USER: I would like to discuss the topic of {topic}."
# The mini profile's short format (``task.format=short``): the benchmark's first and last sentences of the header
# and its question, without the four instruction sentences, so that six conversations fit the stand-in's L_tr of
# 256 tokens (the longeval header and closing alone take about 170 of them). Training and evaluation of the
# stand-in use it; profile=paper refuses it.
SHORT_HEADER = "Below is a record of our previous conversation on {n} different topics. Now the record start. "
SHORT_CLOSING = " Now the record ends. What is the first topic(s) we discussed? Only give me the topic name."
FORMATS = {"longeval": (HEADER, CLOSING), "short": (SHORT_HEADER, SHORT_CLOSING)}
PAPER_DATA = ("LongEval's conversations.jsonl (github.com/DachengLi1/LongChat, "
              "longeval/evaluation/topics/conversations.jsonl)")


@dataclass(frozen=True)
class Conversation:
    """One topic's conversation; ``text`` starts with the USER's opening sentence naming ``topic``; ``words``
    are a generated conversation's subject words (what :func:`more_exchange` talks about), empty for a file's."""

    topic: str
    text: str
    words: tuple[str, ...] = ()


def topics_prompt(conversations: list[str], n_topics: int | None = None, fmt: str = "longeval") -> str:
    """The LongEval topics prompt: header with N, the conversations concatenated, the question; ``fmt`` picks
    LongEval's header and closing or the mini profile's short ones (:data:`FORMATS`).

    Conversations are joined with nothing between them, as upstream appends each conversation's text to
    the record: "...the next topic.USER: I would like to discuss..."."""
    n = len(conversations) if n_topics is None else n_topics
    header, closing = FORMATS[fmt]
    return header.format(n=n) + "".join(conversations) + closing


def read_conversations(path: str | Path) -> list[Conversation]:
    """LongEval's ``conversations.jsonl``: string fields ``topic`` and ``conversation`` on every line."""
    rows = read_jsonl(path, {"topic": str, "conversation": str})
    if not rows:
        raise ValueError(f"{path} holds no conversations")
    return [Conversation(r["topic"], r["conversation"]) for r in rows]


# ---- offline conversations (our own templates) --------------------------------------------------------

# Subjects (with four words or phrases a conversation about them can use) and the frames that turn a subject
# into a topic ("the history of {subject}"): 60 x 20 = 1200 distinct topics, so that a mini-profile record of
# 29 x L_tr tokens still draws a hundred and more conversations without replacement, and a model has to copy
# the first topic out of the record instead of recalling one of a few it has seen.
_SUBJECTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("bicycles", ("frames", "gears", "inventors", "races")),
    ("volcanoes", ("magma", "plates", "eruptions", "ash")),
    ("honey bees", ("hives", "queens", "honey", "flowers")),
    ("jazz music", ("improvisation", "clubs", "trumpets", "swing")),
    ("sourdough bread", ("starter", "flour", "proofing", "crust")),
    ("chess openings", ("pawns", "tempo", "center squares", "gambits")),
    ("coral reefs", ("polyps", "algae", "fish", "bleaching")),
    ("lighthouses", ("lenses", "keepers", "storms", "coastlines")),
    ("green tea", ("leaves", "temperature", "teapots", "steeping")),
    ("glaciers", ("snowfall", "ice sheets", "moraines", "valleys")),
    ("kites", ("string", "wind", "frames", "tails")),
    ("medieval castles", ("moats", "towers", "sieges", "drawbridges")),
    ("submarines", ("ballast", "periscopes", "sonar", "hulls")),
    ("origami", ("folds", "paper", "cranes", "patterns")),
    ("comets", ("tails", "orbits", "ice", "telescopes")),
    ("penguins", ("colonies", "eggs", "krill", "ice floes")),
    ("wind turbines", ("blades", "towers", "generators", "grids")),
    ("pottery", ("clay", "kilns", "glazes", "wheels")),
    ("street food", ("vendors", "spices", "markets", "recipes")),
    ("railways", ("tracks", "locomotives", "timetables", "stations")),
    ("houseplants", ("soil", "repotting", "humidity", "light")),
    ("marathons", ("mileage", "pacing", "shoes", "hydration")),
    ("printing presses", ("movable type", "ink", "books", "guilds")),
    ("the Sahara desert", ("dunes", "oases", "caravans", "winds")),
    ("fresh pasta", ("eggs", "semolina", "dough", "sauces")),
    ("tides", ("the moon", "coastlines", "spring tides", "currents")),
    ("postage stamps", ("albums", "perforations", "postmarks", "auctions")),
    ("vegetable gardens", ("raised beds", "crop rotation", "fences", "seeds")),
    ("rainbows", ("refraction", "droplets", "colors", "angles")),
    ("the Silk Road", ("merchants", "caravanserais", "silk", "spices")),
    ("wool sweaters", ("needles", "yarn", "patterns", "stitches")),
    ("octopuses", ("tentacles", "camouflage", "dens", "problem solving")),
    ("telescopes", ("apertures", "mounts", "eyepieces", "dark skies")),
    ("the Olympic Games", ("athletes", "olive wreaths", "stadiums", "truces")),
    ("pickled vegetables", ("brine", "jars", "cabbage", "bacteria")),
    ("the water cycle", ("evaporation", "clouds", "rivers", "groundwater")),
    ("public libraries", ("volunteers", "shelves", "donations", "catalogs")),
    ("sled dogs", ("harnesses", "mushers", "snow", "endurance")),
    ("watercolor painting", ("brushes", "washes", "paper", "pigments")),
    ("the pyramids of Giza", ("limestone", "ramps", "workers", "quarries")),
    ("freshwater aquariums", ("filters", "tank mates", "algae", "water tests")),
    ("daily habits", ("cues", "rewards", "routines", "motivation")),
    ("coffee", ("ceremonies", "beans", "roasting", "highlands")),
    ("suspension bridges", ("beams", "cables", "towers", "loads")),
    ("stray cats", ("shelters", "adoption", "vets", "foster homes")),
    ("chocolate", ("cacao", "traders", "sugar", "factories")),
    ("sailing boats", ("knots", "rudders", "wind", "tacking")),
    ("the cello", ("bowing", "scales", "posture", "rosin")),
    ("monarch butterflies", ("milkweed", "wintering sites", "generations", "routes")),
    ("old furniture", ("varnish", "sanding", "joints", "oak")),
    ("cricket", ("wickets", "overs", "bowlers", "umpires")),
    ("mountain trails", ("maps", "boots", "weather", "trails")),
    ("vaccines", ("antibodies", "immune cells", "trials", "doses")),
    ("gothic cathedrals", ("arches", "buttresses", "stained glass", "spires")),
    ("compost heaps", ("worms", "bins", "nitrogen", "moisture")),
    ("sleep", ("dreams", "circadian rhythms", "melatonin", "naps")),
    ("bird photography", ("lenses", "feeders", "shutter speed", "hides")),
    ("wooden boats", ("planks", "hulls", "epoxy", "oars")),
    ("second languages", ("vocabulary", "grammar", "accents", "practice")),
    ("technical writing", ("examples", "audiences", "structure", "diagrams")),
)
_FRAMES = (
    "the history of {s}", "the future of {s}", "the economics of {s}", "common myths about {s}",
    "teaching children about {s}", "the science behind {s}", "famous stories about {s}",
    "the environmental impact of {s}", "careers related to {s}", "the best books on {s}",
    "getting started with {s}", "the cultural meaning of {s}", "safety rules for {s}", "the vocabulary of {s}",
    "regional traditions around {s}", "mistakes beginners make with {s}", "the tools used with {s}",
    "recent research on {s}", "the art of photographing {s}", "the ethics of {s}",
)

_USER_TURNS = (
    "What should a beginner know about {w0}?",
    "Why do people care so much about {w1}?",
    "What is a common mistake people make with {w2}?",
    "Can you tell me more about {w3}?",
    "Is there a simple way to think about this?",
    "How would you explain this to a child?",
)
_ASSISTANT_SENTENCES = (
    "A good place to start is {w0}, because much else builds on it.",
    "Many people underestimate how much {w1} matters.",
    "It helps to write down what you learn about {w2}.",
    "Experts say that {w3} is where the real craft lies.",
    "There is no single right answer, but patience pays off.",
    "If you compare {w0} with {w1}, you see how they depend on each other.",
    "Local clubs can help with questions about {w2}.",
    "Historically, {w1} was treated very differently.",
    "Mistakes are normal, and each one teaches you something about {w0}.",
    "Most of the difficulty goes away once you understand {w3}.",
)


def generate_conversation(topic: str, words: tuple[str, ...], rng: random.Random) -> Conversation:
    """A short conversation about ``topic`` from our own templates: the benchmark's opening sentence and a
    one-sentence ASSISTANT answer; a third of them go on with one USER question and a one-sentence answer
    (about 20-45 words: several fit a record at every mini setting, as the benchmark's 5-25 topics do)."""
    slots = {f"w{i}": w for i, w in enumerate(words)}
    turns = [OPENER.format(topic=topic), "ASSISTANT: " + rng.choice(_ASSISTANT_SENTENCES).format(**slots)]
    if rng.random() < 1 / 3:
        turns.append("USER: " + rng.choice(_USER_TURNS).format(**slots))
        turns.append("ASSISTANT: " + rng.choice(_ASSISTANT_SENTENCES).format(**slots))
    return Conversation(topic, " ".join(turns), words)


def more_exchange(conversation: Conversation, rng: random.Random) -> list[str]:
    """One more USER question and ASSISTANT answer about a generated conversation's subject, from the same
    templates (records that hold few conversations at many tokens lengthen each conversation with these)."""
    slots = {f"w{i}": w for i, w in enumerate(conversation.words)}
    return ["USER: " + rng.choice(_USER_TURNS).format(**slots),
            "ASSISTANT: " + rng.choice(_ASSISTANT_SENTENCES).format(**slots)]


@lru_cache(maxsize=8)
def generate_conversations(seed: int = 0) -> tuple[Conversation, ...]:
    """One generated conversation per topic (every frame of every subject: 1200 topics), seeded; the order
    interleaves subjects so that any prefix covers many of them."""
    rng = random.Random(f"topics-conversations:{seed}")
    return tuple(generate_conversation(frame.format(s=subject), words, rng)
                 for frame in _FRAMES for subject, words in _SUBJECTS)


def count_problem(task_cfg: Any, profile: str) -> str | None:
    """Why ``task.format`` / ``task.num_topics`` cannot run, or ``None``: :func:`lengthx.tasks.base.count_knob_problem`,
    and no more conversations than are available."""
    problem = count_knob_problem(task_cfg, profile, "topics", "num_topics", "conversations", FORMATS)
    k = task_cfg.get("num_topics")
    if problem or k is None:
        return problem
    if not task_cfg.get("conversations_path") and k > len(generate_conversations()):
        return f"task.num_topics={k}: only {len(generate_conversations())} conversations are available. Fix: a smaller count"
    return None


# ---- the task ------------------------------------------------------------------------------------------


_WORD_END = re.compile(r"\S+")


class TopicsTask(Task):
    """LongEval topics: seeded multi-topic records, normalised-containment scoring of the first topic."""

    name = "topics"
    metrics = ("accuracy",)
    units = ("topics", "tokens")  # what task.unit may name (the unit of explicit task.settings)
    calibration_item = "first"  # meta key of the asked (first) conversation: calibration never asks the same
    paper_data = PAPER_DATA
    stand_in = {GENERATED: "conversations generated from lengthx's templates"}  # data label → what it is
    score_note = ("Topic retrieval is scored by normalised containment of the first topic in the output; "
                  "upstream LongEval asked a GPT model to judge it, so topic numbers are not directly comparable.")

    def __init__(self, max_new_tokens: int = 50, conversations_path: str | None = None,
                 testcases_dir: str | None = None, seed: int = 0, prompt_format: str = "longeval",
                 num_topics: int | None = None):
        if prompt_format not in FORMATS:
            raise ValueError(f"task.format={prompt_format}: no such topics format. Fix: one of {', '.join(FORMATS)}")
        self.max_new_tokens = max_new_tokens
        self.conversations_path = conversations_path
        self.testcases_dir, self.seed = testcases_dir, int(seed)
        self.prompt_format, self.num_topics = prompt_format, num_topics
        self._conversations: tuple[Conversation, ...] | None = None

    @classmethod
    def from_config(cls, task_cfg: Any, profile: str = "mini") -> TopicsTask:
        """The task from its Hydra config (``conf/task/topics.yaml``); the paper profile needs the real file."""
        problem = cls.data_problem(task_cfg, profile)
        if problem and profile == "paper":
            raise ValueError(problem)
        k = task_cfg.get("num_topics")
        return cls(max_new_tokens=int(task_cfg.max_new_tokens),
                   conversations_path=task_cfg.get("conversations_path"),
                   testcases_dir=task_cfg.get("testcases_dir"), seed=int(task_cfg.get("seed") or 0),
                   prompt_format=str(task_cfg.get("format") or "longeval"), num_topics=None if k is None else int(k))

    @staticmethod
    def data_problem(task_cfg: Any, profile: str, settings: list[Setting] | None = None) -> str | None:
        """Why this config cannot read its conversations, or ``None``: a configured file must exist, and the
        paper profile must have one (generated conversations are the mini profile's stand-in only); the same for
        ``task.testcases_dir``'s released cases (:mod:`lengthx.tasks.longeval_testcases`)."""
        released = testcases_problem(task_cfg, "topics", "topics", settings)
        if released:
            return released
        counts = count_problem(task_cfg, profile)
        if counts:
            return counts
        path = task_cfg.get("conversations_path")
        most = len(generate_conversations())
        too_many = [s.value for s in settings or () if s.unit == "topics" and s.value > most]
        if too_many and not path and not task_cfg.get("testcases_dir"):
            return (f"task.settings: {too_many[0]} topics, but the generated conversations are {most}. Fix: a count "
                    f"of at most {most}, or task.unit=tokens if {too_many[0]} is a length in tokens")
        if path:
            return missing_path("task.conversations_path", path, PAPER_DATA)
        if profile == "paper":
            return (f"task=topics in profile=paper reads {PAPER_DATA}; task.conversations_path is not set. Fix: "
                    "download that file and pass task.conversations_path=FILE (generated conversations are the "
                    "mini profile's stand-in, never the paper profile's)")
        return None

    def _released(self, setting: Setting) -> Path | None:
        """The released test-case file a setting evaluates, or ``None`` (records built from conversations)."""
        if self.testcases_dir and setting.unit == "topics":
            return testcase_path(self.testcases_dir, "topics", setting.value)
        return None

    def data_source(self, setting: Setting) -> str:
        """The released test-case file, else the conversations file (name and hash), or ``generated``
        (lengthx.data.provenance)."""
        released = self._released(setting)
        if released is not None:
            return file_label(released)
        return file_label(self.conversations_path) if self.conversations_path else GENERATED

    def conversations(self) -> tuple[Conversation, ...]:
        """LongEval's conversations when a path is configured, else the generated ones."""
        if self._conversations is None:
            if self.conversations_path:
                self._conversations = tuple(read_conversations(self.conversations_path))
            else:
                self._conversations = generate_conversations()
        return self._conversations

    def _order(self, seed: int, i: int) -> list[int]:
        """The case's conversations: a seeded permutation (topics drawn without replacement)."""
        order = list(range(len(self.conversations())))
        random.Random(f"topics:{seed}:{i}").shuffle(order)
        return order

    def examples(self, setting: Setting, tokenizer: PreTrainedTokenizerBase, n: int, seed: int,
                 exclude: Collection[int] = (), reserve: int = 0) -> list[Example]:
        """``n`` examples at ``setting``: N whole conversations (``topics``) or a fitted record (``tokens``).

        ``exclude``: conversations (indices, ``meta["first"]``) that may not open a record; each case's
        permutation then starts with its first conversation outside ``exclude``, so Algorithm 1's calibration
        records never ask for a topic that an evaluation record asks for, whatever the seeds (a case with no
        such conversation is dropped). ``reserve`` is accepted for the runner's finite-pool protocol: the
        records are permutations, never an exhausted pool.

        With ``testcases_dir`` a setting of N topics evaluates the first ``n`` cases of ``{N}_topics.jsonl`` at the
        task's own seed; any other seed (Algorithm 1's calibration records) builds records from the conversations."""
        released = self._released(setting)
        if released is not None and seed == self.seed:
            return self._released_examples(released, tokenizer, n, seed)
        convs = self.conversations()
        excluded = set(exclude)
        out = []
        for i in range(n):
            order = self._order(seed, i)
            if excluded:
                free = next((k for k, j in enumerate(order) if j not in excluded), None)
                if free is None:
                    break
                order.insert(0, order.pop(free))
            if setting.unit == "topics":
                if setting.value > len(convs):
                    raise ValueError(f"{setting.value} topics requested but only {len(convs)} conversations "
                                     "are available (topics are drawn without replacement)")
                chosen = [convs[j] for j in order[: setting.value]]
                prompt, requested, n_topics, partial = topics_prompt([c.text for c in chosen], fmt=self.prompt_format), \
                    None, setting.value, False
            elif setting.unit == "tokens" and self.num_topics is not None:
                requested, n_topics = setting.value, self.num_topics
                if n_topics > len(convs):
                    raise ValueError(f"task.num_topics={n_topics} but only {len(convs)} conversations are available")
                chosen = [convs[j] for j in order[:n_topics]]
                prompt, kept, partial = fixed_count_record(chosen, tokenizer, requested, f"topics-turns:{seed}:{i}",
                                                           self.prompt, more_exchange)
            elif setting.unit == "tokens":
                requested = setting.value
                prompt, chosen, n_topics, partial = self.fit_record(order, tokenizer, requested)
            else:
                raise ValueError(f"topics settings are in topics or tokens, not {setting.unit!r}")
            meta = {"n_topics": n_topics, "last_partial": partial, "first": order[0],
                    "topics": [c.topic for c in chosen[:n_topics]]}
            if setting.unit == "tokens" and self.num_topics is not None:
                meta["turns"] = kept  # turns kept per conversation (lengthx.tasks.topics_records)
            out.append(Example(f"{seed}-{i}", prompt, chosen[0].topic, requested, count_tokens(tokenizer, prompt), meta))
        return out

    def prompt(self, texts: list[str], n_topics: int | None = None) -> str:
        """:func:`topics_prompt` in this task's format."""
        return topics_prompt(texts, n_topics, self.prompt_format)

    def count_problem_at(self, tokenizer: PreTrainedTokenizerBase, target: int,
                         draws: tuple[int, int] | None = None) -> str | None:
        """Why ``num_topics`` conversations may not fit ``target`` tokens, or ``None``: the worst draw
        (:func:`lengthx.tasks.topics_records.count_fits`) or, with ``draws`` = (seed, n), the first ``n`` draws of
        that seed, the records a run builds (a worst draw that no example of the run holds does not stop it)."""
        if self.num_topics is None:
            return None
        convs, k = list(self.conversations()), self.num_topics
        problem = count_fits(convs, k, tokenizer, self.prompt, target)
        if problem is None or draws is None or k > len(convs):
            return problem
        seed, n = draws
        for i in range(n):
            need = minimal_tokens([convs[j] for j in self._order(seed, i)[:k]], tokenizer, self.prompt)
            if need > target:
                return (f"task.num_topics={k}: example {i} of task.seed={seed} draws {k} conversations that need "
                        f"{need} tokens (header, {k} opening sentences, the question) but task.settings has "
                        f"{target}. Fix: a setting of at least {need} tokens, another task.seed, or a smaller "
                        "task.num_topics")
        return None

    def training_record(self, tokenizer: PreTrainedTokenizerBase, l_tr: int, k_max: int,
                        rng: random.Random) -> tuple[str, str, int]:
        """One training record of at most ``l_tr`` tokens for a stand-in that must find the first of several
        topics (docs/mini-t5-study.md): half hold exactly K conversations, K uniform in 1..``k_max``, at a token
        length uniform between their shortest record and ``l_tr``
        (:func:`lengthx.tasks.topics_records.fixed_count_record`); half are the benchmark's records (whole
        conversations until a length uniform up to ``l_tr``, the last cut at a word). Returns (prompt, first
        topic, conversations in the record); ``ValueError`` when the K opening sentences drawn exceed ``l_tr``."""
        convs = self.conversations()
        order = rng.sample(range(len(convs)), k_max)
        chosen = [convs[j] for j in order]
        if rng.random() < 0.5:
            k = rng.randint(1, k_max)
            need = minimal_tokens(chosen[:k], tokenizer, self.prompt)
            prompt, _, _ = fixed_count_record(chosen[:k], tokenizer, rng.randint(need, l_tr), f"train:{rng.random()}",
                                              self.prompt, more_exchange)
            return prompt, chosen[0].topic, k
        need = minimal_tokens(chosen[:1], tokenizer, self.prompt)
        rest = [j for j in rng.sample(range(len(convs)), min(len(convs), 64)) if j not in order]
        prompt, _, n, _ = self.fit_record(order + rest, tokenizer, rng.randint(need, l_tr))
        return prompt, chosen[0].topic, n

    def _released_examples(self, path: Path, tokenizer: PreTrainedTokenizerBase, n: int, seed: int) -> list[Example]:
        """The first ``n`` released cases of ``path``: their prompts as they are, their first topics as answers.
        ``meta["first"]`` is the first topic's conversation when the conversations hold it (calibration records
        then never open with it), else the topic itself."""
        rows = read_testcases(path, "topics")
        if n > len(rows):
            raise ValueError(f"{path} holds {len(rows)} test cases; task.num_examples={n} asks for more")
        index = {c.topic: j for j, c in enumerate(self.conversations())}
        return [Example(f"{seed}-{i}", row["prompt"], row["topics"][0], None, count_tokens(tokenizer, row["prompt"]),
                        {"n_topics": len(row["topics"]), "last_partial": False,
                         "first": index.get(row["topics"][0], row["topics"][0]), "topics": row["topics"],
                         "testcase": f"{path.name}:{row['_line']}"})
                for i, row in enumerate(rows[:n])]

    def fit_record(self, order: list[int], tokenizer: PreTrainedTokenizerBase, target: int) -> tuple[str, list[Conversation], int, bool]:
        """The record cut at a word boundary so that the prompt has at most ``target`` tokens."""
        convs = self.conversations()
        chosen: list[Conversation] = []
        for j in order:  # enough conversations to exceed the target
            chosen.append(convs[j])
            if count_tokens(tokenizer, topics_prompt([c.text for c in chosen], fmt=self.prompt_format)) > target:
                break
        else:
            raise ValueError(f"all {len(convs)} conversations together have fewer than {target} tokens")
        ends: list[tuple[int, int, int]] = []  # (conversation, char end in it, is_last_word)
        for ci, conv in enumerate(chosen):
            matches = list(_WORD_END.finditer(conv.text))
            ends += [(ci, m.end(), int(k == len(matches) - 1)) for k, m in enumerate(matches)]

        def build(w: int) -> str:
            if w == 0:
                return topics_prompt([], 0, self.prompt_format)
            ci, end, _ = ends[w - 1]
            texts = [c.text for c in chosen[:ci]] + [chosen[ci].text[:end]]
            return topics_prompt(texts, ci + 1, self.prompt_format)

        w, prompt, _ = fit_to_tokens(build, tokenizer, target, hi=len(ends))
        if w == 0:
            raise ValueError(f"{target} tokens cannot hold even the first word of a conversation")
        ci, _, last = ends[w - 1]
        return prompt, chosen[: ci + 1], ci + 1, not last

    def score(self, output: str, example: Example) -> dict[str, float]:
        """100 when the normalised first topic occurs in the normalised output (see module doc), else 0."""
        return {"accuracy": 100.0 * topic_correct(output, example.target)}
