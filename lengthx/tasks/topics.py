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

Settings: ``topics`` (N full conversations, the paper's unit) or ``tokens``: the record is then the
seeded sequence of conversations cut at a word boundary so that the prompt has the requested token count
(bisection with the model's tokenizer); the last conversation may be cut short, and N in the header counts
the conversations that the record contains (the last one possibly partial), as recorded in ``meta``.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lengthx.data.fitting import count_tokens, fit_to_tokens
from lengthx.data.jsonl import read_jsonl
from lengthx.data.provenance import GENERATED, file_label
from lengthx.tasks.base import Example, Setting, missing_path
from lengthx.tasks.metrics import topic_correct

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
PAPER_DATA = ("LongEval's conversations.jsonl (github.com/DachengLi1/LongChat, "
              "longeval/evaluation/topics/conversations.jsonl)")


@dataclass(frozen=True)
class Conversation:
    """One topic's conversation; ``text`` starts with the USER's opening sentence naming ``topic``."""

    topic: str
    text: str


def topics_prompt(conversations: list[str], n_topics: int | None = None) -> str:
    """The LongEval topics prompt: header with N, the conversations concatenated, the question.

    Conversations are joined with nothing between them, as upstream appends each conversation's text to
    the record: "...the next topic.USER: I would like to discuss..."."""
    n = len(conversations) if n_topics is None else n_topics
    return HEADER.format(n=n) + "".join(conversations) + CLOSING


def read_conversations(path: str | Path) -> list[Conversation]:
    """LongEval's ``conversations.jsonl``: string fields ``topic`` and ``conversation`` on every line."""
    rows = read_jsonl(path, {"topic": str, "conversation": str})
    if not rows:
        raise ValueError(f"{path} holds no conversations")
    return [Conversation(r["topic"], r["conversation"]) for r in rows]


# ---- offline conversations (our own templates) --------------------------------------------------------

# (topic, four words or phrases the conversation can use)
_TOPICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("growing tomatoes on a balcony", ("pots", "sunlight", "watering", "seedlings")),
    ("the history of the bicycle", ("frames", "gears", "inventors", "races")),
    ("learning to play the cello", ("bowing", "scales", "posture", "rosin")),
    ("baking sourdough bread", ("starter", "flour", "proofing", "crust")),
    ("how volcanoes form", ("magma", "plates", "eruptions", "ash")),
    ("training a puppy", ("treats", "leashes", "routines", "patience")),
    ("saving money for retirement", ("budgets", "interest", "pensions", "savings")),
    ("the life cycle of stars", ("nebulae", "fusion", "supernovae", "gravity")),
    ("writing a mystery novel", ("suspects", "clues", "plot twists", "chapters")),
    ("keeping bees in the city", ("hives", "queens", "honey", "flowers")),
    ("restoring old furniture", ("varnish", "sanding", "joints", "oak")),
    ("the rules of cricket", ("wickets", "overs", "bowlers", "umpires")),
    ("planning a hiking trip in the mountains", ("maps", "boots", "weather", "trails")),
    ("how vaccines work", ("antibodies", "immune cells", "trials", "doses")),
    ("the architecture of gothic cathedrals", ("arches", "buttresses", "stained glass", "spires")),
    ("brewing green tea", ("leaves", "temperature", "teapots", "steeping")),
    ("the migration of monarch butterflies", ("milkweed", "wintering sites", "generations", "routes")),
    ("building a small wooden boat", ("planks", "hulls", "epoxy", "oars")),
    ("learning a second language as an adult", ("vocabulary", "grammar", "accents", "practice")),
    ("the basics of chess openings", ("pawns", "tempo", "center squares", "gambits")),
    ("composting kitchen scraps", ("worms", "bins", "nitrogen", "moisture")),
    ("the science of sleep", ("dreams", "circadian rhythms", "melatonin", "naps")),
    ("photographing birds", ("lenses", "feeders", "shutter speed", "hides")),
    ("running a first marathon", ("mileage", "pacing", "shoes", "hydration")),
    ("the invention of the printing press", ("movable type", "ink", "books", "guilds")),
    ("caring for houseplants", ("soil", "repotting", "humidity", "light")),
    ("the geography of the Sahara", ("dunes", "oases", "caravans", "winds")),
    ("making homemade pasta", ("eggs", "semolina", "dough", "sauces")),
    ("the ethics of artificial intelligence", ("fairness", "privacy", "accountability", "bias")),
    ("how tides work", ("the moon", "coastlines", "spring tides", "currents")),
    ("collecting vintage stamps", ("albums", "perforations", "postmarks", "auctions")),
    ("the history of jazz", ("improvisation", "clubs", "trumpets", "swing")),
    ("designing a vegetable garden", ("raised beds", "crop rotation", "fences", "seeds")),
    ("the physics of rainbows", ("refraction", "droplets", "colors", "angles")),
    ("starting a small bakery business", ("ovens", "customers", "licenses", "pricing")),
    ("the ancient Silk Road", ("merchants", "caravanserais", "silk", "spices")),
    ("knitting a wool sweater", ("needles", "yarn", "patterns", "stitches")),
    ("the behavior of octopuses", ("tentacles", "camouflage", "dens", "problem solving")),
    ("choosing a first telescope", ("apertures", "mounts", "eyepieces", "dark skies")),
    ("reducing household energy use", ("insulation", "thermostats", "appliances", "bills")),
    ("the origins of the Olympic Games", ("athletes", "olive wreaths", "stadiums", "truces")),
    ("fermenting vegetables at home", ("brine", "jars", "cabbage", "bacteria")),
    ("the water cycle", ("evaporation", "clouds", "rivers", "groundwater")),
    ("organizing a community library", ("volunteers", "shelves", "donations", "catalogs")),
    ("the training of sled dogs", ("harnesses", "mushers", "snow", "endurance")),
    ("painting with watercolors", ("brushes", "washes", "paper", "pigments")),
    ("the construction of the pyramids", ("limestone", "ramps", "workers", "quarries")),
    ("keeping a freshwater aquarium", ("filters", "tank mates", "algae", "water tests")),
    ("the psychology of habits", ("cues", "rewards", "routines", "motivation")),
    ("repairing a leaking faucet", ("washers", "valves", "wrenches", "seals")),
    ("the culture of coffee in Ethiopia", ("ceremonies", "beans", "roasting", "highlands")),
    ("how bridges carry weight", ("beams", "cables", "arches", "loads")),
    ("rescuing abandoned cats", ("shelters", "adoption", "vets", "foster homes")),
    ("the history of chocolate", ("cacao", "traders", "sugar", "factories")),
    ("preparing for a job interview", ("resumes", "questions", "references", "nerves")),
    ("the formation of glaciers", ("snowfall", "ice sheets", "moraines", "valleys")),
    ("learning to sail", ("knots", "rudders", "wind", "tacking")),
    ("the ecology of coral reefs", ("polyps", "algae", "fish", "bleaching")),
    ("writing clear technical documentation", ("examples", "audiences", "structure", "diagrams")),
    ("the craft of pottery", ("clay", "kilns", "glazes", "wheels")),
)

_USER_TURNS = (
    "What should a beginner know about {topic}?",
    "Why do people find {topic} so interesting?",
    "What is a common mistake people make with {w0}?",
    "Can you tell me more about {w1}?",
    "How does {w2} fit into all of this?",
    "Is there a simple way to think about {w3}?",
    "What would you recommend reading first?",
    "How much time does it usually take to get good at this?",
    "Are there any surprising facts here?",
    "What changed the most over the last hundred years?",
    "How would you explain this to a child?",
    "What are the costs involved?",
)
_ASSISTANT_SENTENCES = (
    "A good place to start is {w0}, because almost everything else builds on it.",
    "Many people underestimate how much {w1} matters in practice.",
    "It helps to keep a small notebook and write down what you learn about {w2}.",
    "Experts often say that {w3} is where the real craft lies.",
    "There is no single right answer, but patience usually pays off.",
    "Small, regular steps tend to work better than occasional big efforts.",
    "If you compare {w0} with {w1}, you will notice they depend on each other.",
    "Local clubs and online groups can be surprisingly helpful for questions about {w2}.",
    "The details vary from place to place, so it is worth checking what applies to you.",
    "One useful habit is to review {w3} once a week and note what has changed.",
    "Historically, {w1} was treated very differently from how it is treated today.",
    "Mistakes are normal, and each one teaches you something about {w0}.",
    "You do not need expensive equipment at the beginning.",
    "Most of the difficulty disappears once you understand {w2}.",
    "People who stick with it for a few months usually see clear progress.",
    "It is a good idea to ask someone experienced to look at your first attempts.",
)


def generate_conversation(topic: str, words: tuple[str, ...], rng: random.Random) -> Conversation:
    """A conversation about ``topic`` from our own templates: the benchmark's opening sentence, then 5-7
    exchanges of a USER question and a 3-5 sentence ASSISTANT answer (roughly 350-450 words, like
    LongEval's conversations)."""
    slots = {"topic": topic, **{f"w{i}": w for i, w in enumerate(words)}}
    turns = [OPENER.format(topic=topic)]
    turns.append("ASSISTANT: " + " ".join(s.format(**slots) for s in rng.sample(_ASSISTANT_SENTENCES, 3)))
    for question in rng.sample(_USER_TURNS, rng.randint(5, 7)):
        turns.append("USER: " + question.format(**slots))
        answer = rng.sample(_ASSISTANT_SENTENCES, rng.randint(3, 5))
        turns.append("ASSISTANT: " + " ".join(s.format(**slots) for s in answer))
    return Conversation(topic, " ".join(turns))


@lru_cache(maxsize=8)
def generate_conversations(seed: int = 0) -> tuple[Conversation, ...]:
    """One generated conversation per built-in topic (60 topics), seeded."""
    rng = random.Random(f"topics-conversations:{seed}")
    return tuple(generate_conversation(t, w, rng) for t, w in _TOPICS)


# ---- the task ------------------------------------------------------------------------------------------


_WORD_END = re.compile(r"\S+")


class TopicsTask:
    """LongEval topics: seeded multi-topic records, normalised-containment scoring of the first topic."""

    name = "topics"
    metrics = ("accuracy",)
    paper_data = PAPER_DATA
    stand_in = {GENERATED: "conversations generated from lengthx's templates"}  # data label → what it is
    score_note = ("Topic retrieval is scored by normalised containment of the first topic in the output; "
                  "upstream LongEval asked a GPT model to judge it, so topic numbers are not directly comparable.")

    def __init__(self, max_new_tokens: int = 50, conversations_path: str | None = None):
        self.max_new_tokens = max_new_tokens
        self.conversations_path = conversations_path
        self._conversations: tuple[Conversation, ...] | None = None

    @classmethod
    def from_config(cls, task_cfg: Any, profile: str = "mini") -> TopicsTask:
        """The task from its Hydra config (``conf/task/topics.yaml``); the paper profile needs the real file."""
        problem = cls.data_problem(task_cfg, profile)
        if problem and profile == "paper":
            raise ValueError(problem)
        return cls(max_new_tokens=int(task_cfg.max_new_tokens),
                   conversations_path=task_cfg.get("conversations_path"))

    @staticmethod
    def data_problem(task_cfg: Any, profile: str, settings: list[Setting] | None = None) -> str | None:
        """Why this config cannot read its conversations, or ``None``: a configured file must exist, and the
        paper profile must have one (generated conversations are the mini profile's stand-in only)."""
        path = task_cfg.get("conversations_path")
        if path:
            return missing_path("task.conversations_path", path, PAPER_DATA)
        if profile == "paper":
            return (f"task=topics in profile=paper reads {PAPER_DATA}; task.conversations_path is not set. Fix: "
                    "download that file and pass task.conversations_path=FILE (generated conversations are the "
                    "mini profile's stand-in, never the paper profile's)")
        return None

    def data_source(self, setting: Setting) -> str:
        """The conversations file (name and hash), or ``generated`` (lengthx.data.provenance)."""
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

    def examples(self, setting: Setting, tokenizer: PreTrainedTokenizerBase, n: int, seed: int) -> list[Example]:
        """``n`` examples at ``setting``: N whole conversations (``topics``) or a fitted record (``tokens``)."""
        convs = self.conversations()
        out = []
        for i in range(n):
            order = self._order(seed, i)
            if setting.unit == "topics":
                if setting.value > len(convs):
                    raise ValueError(f"{setting.value} topics requested but only {len(convs)} conversations "
                                     "are available (topics are drawn without replacement)")
                chosen = [convs[j] for j in order[: setting.value]]
                prompt, requested, n_topics, partial = topics_prompt([c.text for c in chosen]), None, \
                    setting.value, False
            elif setting.unit == "tokens":
                requested = setting.value
                prompt, chosen, n_topics, partial = self._fit(order, tokenizer, requested)
            else:
                raise ValueError(f"topics settings are in topics or tokens, not {setting.unit!r}")
            out.append(Example(f"{seed}-{i}", prompt, chosen[0].topic, requested, count_tokens(tokenizer, prompt),
                               {"n_topics": n_topics, "last_partial": partial,
                                "topics": [c.topic for c in chosen[:n_topics]]}))
        return out

    def _fit(self, order: list[int], tokenizer, target: int) -> tuple[str, list[Conversation], int, bool]:
        """The record cut at a word boundary so that the prompt has at most ``target`` tokens."""
        convs = self.conversations()
        chosen: list[Conversation] = []
        for j in order:  # enough conversations to exceed the target
            chosen.append(convs[j])
            if count_tokens(tokenizer, topics_prompt([c.text for c in chosen])) > target:
                break
        else:
            raise ValueError(f"all {len(convs)} conversations together have fewer than {target} tokens")
        ends: list[tuple[int, int, int]] = []  # (conversation, char end in it, is_last_word)
        for ci, conv in enumerate(chosen):
            matches = list(_WORD_END.finditer(conv.text))
            ends += [(ci, m.end(), int(k == len(matches) - 1)) for k, m in enumerate(matches)]

        def build(w: int) -> str:
            if w == 0:
                return topics_prompt([], 0)
            ci, end, _ = ends[w - 1]
            texts = [c.text for c in chosen[:ci]] + [chosen[ci].text[:end]]
            return topics_prompt(texts, ci + 1)

        w, prompt, _ = fit_to_tokens(build, tokenizer, target, hi=len(ends))
        if w == 0:
            raise ValueError(f"{target} tokens cannot hold even the first word of a conversation")
        ci, _, last = ends[w - 1]
        return prompt, chosen[: ci + 1], ci + 1, not last

    def score(self, output: str, example: Example) -> dict[str, float]:
        """100 when the normalised first topic occurs in the normalised output (see module doc), else 0."""
        return {"accuracy": 100.0 * topic_correct(output, example.target)}
