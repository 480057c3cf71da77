"""Line retrieval (LongEval "lines", Li et al. 2023), as used in paper A §5.2 / Table 4.

Format (docs/design.md §10, verbatim benchmark text): a header asking to memorise the ``<REGISTER_CONTENT>`` of every
line, then lines ``line {idx}: REGISTER_CONTENT is <{n}>`` (each ending in a newline) where ``idx`` is an
adjective-noun pair drawn from ``wonderwords`` word lists (e.g. ``"swift-river"``) and ``n`` is uniform in
1..50000, then the question about one line chosen uniformly. Upstream used 50 cases per setting (number of
lines: 200, 300, …, 680). The score rule (docs/design.md §6) is: the *last* integer of the output equals ``n``.

This module is pure Python: building prompts, seeded cases and the word lists. Token-exact length fitting
and scoring by a model live elsewhere. ``task.testcases_dir`` evaluates LongEval's released cases instead
(:mod:`lengthx.tasks.longeval_testcases`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lengthx.data.fitting import bisect_largest, count_tokens
from lengthx.data.provenance import SYNTHETIC, file_label
from lengthx.tasks.base import Example, Setting, Task, count_knob_problem
from lengthx.tasks.lines_records import depths, fill_to, filled_body
from lengthx.tasks.longeval_testcases import read_testcases, testcase_path, testcases_problem
from lengthx.tasks.metrics import lines_correct

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

HEADER = (
    "Below is a record of lines I want you to remember. Each line begins with 'line <line index>' and "
    "contains a '<REGISTER_CONTENT>' at the end of the line as a numerical value. For each line index, "
    "memorize its corresponding <REGISTER_CONTENT>. At the end of the record, I will ask you to retrieve "
    "the corresponding <REGISTER_CONTENT> of a certain line index. Now the record start:\n\n"
)


LINE_TEMPLATE = "line {idx}: REGISTER_CONTENT is <{n}>\n"


QUESTION_TEMPLATE = (
    "\nNow the record is over. Tell me what is the <REGISTER_CONTENT> in line {idx}? I need the number."
)


# The mini profile's short format (``task.format=short``): the benchmark's first and last header sentences, without
# the three instruction sentences between them, so that about twelve lines fit the lookup stand-in's L_tr of 256
# tokens (the longeval header and question alone take about 150 of them). Lines and question are the benchmark's.
# Training and evaluation of the stand-in use it (docs/mini-t5-lookup.md); profile=paper refuses it.
SHORT_HEADER = "Below is a record of lines I want you to remember. Now the record start:\n\n"
FORMATS = {"longeval": HEADER, "short": SHORT_HEADER}


MAX_VALUE = 50000


# Frozen fallback vocabulary: a fixed subset of wonderwords' own adjective and noun lists (wonderwords 3.0.1:
# every 3rd adjective and every 8th noun among the lower-case single words), used only when wonderwords is
# not installed.
_FROZEN_ADJECTIVES = (
    "quizzical wakeful cooperative uneven vacuous sparkling late friendly busy premium rambunctious fat "
    "resonant vast wary wooden cloudy trite round brave colossal elegant exuberant odd imported deeply "
    "rotten succinct learned efficacious torpid strong dry ahead piquant periodic narrow fantastic "
    "cowardly bloody oval stingy illegal rustic gorgeous unadvised loving wretched pretty unequaled hurt "
    "warm excellent eatable unbiased cuddly overwrought crazy joyous high wet magenta productive needy "
    "fortunate husky faulty watery aspiring billowy heartbreaking wistful psychedelic ambiguous crowded "
    "hypnotic nonchalant deafening typical mute rebellious unsuitable sassy adhesive curly better nifty "
    "ritzy spotless bashful moaning half measly goofy addicted erratic delicious innocent awful giddy "
    "petite abounding honorable phobic parched pleasant dashing laughable scary unbecoming repulsive "
    "disturbed loud vulgar synonymous embarrassed ethereal open ancient murky heady obtainable gainful "
    "tightfisted gaudy shiny relieved parsimonious wide tangible screeching picayune staking wandering "
    "glib outstanding modern gentle curved afraid lackadaisical absorbed thundering axiomatic tired mushy "
    "upset deadpan absurd wry lying super absorbing halting lethal obsequious holistic quaint grotesque "
    "unable knowledgeable luxuriant guarded spurious famous nasty tawdry shy worried ruddy thoughtless "
    "slimy plausible smiling steadfast subsequent teeny uppity silly wiry childlike pumped weary smoggy "
    "steep talented ill didactic tough abortive supreme inquisitive lowly acrid unusual capable dazzling "
    "hellish lovely breakable devilish jaded adaptable tense troubled plain offbeat cagey venomous "
    "youthful sincere zonked frantic damaged maddening strange madly difficult temporary rainy "
    "domineering jealous overt cautious anxious ragged knotty draconian versed ludicrous lavish "
    "overconfident wee royal eager spooky excited womanly testy early nappy nosy overrated soft "
    "accessible old magnificent economic racial broad witty feigned apathetic combative voracious utter "
    "finicky noisy rare ratty muddy hulking abusive thankful lively amused agonizing sneaky alleged "
    "macabre low decisive happy spicy peaceful upbeat dull groovy romantic smooth cruel faded average "
    "juvenile wealthy jagged garrulous annoying selfish ossified aromatic evasive uttermost energetic "
    "guiltless aware rightful rich daily rough rural"
).split()


_FROZEN_NOUNS = (
    "aardvark abrogation accent accord accusation acquaintance activity addition admission advancement "
    "advocacy afterlife agenda aid airfield airspace ale allegation alluvium alphabet amazement amendment "
    "analog anatomy angina anise ant antibody anxiety apology appetiser appointment apse archer ark "
    "armpit arrow artist asparagus assessment assumption asymmetry attachment attenuation audit "
    "authorization avenue babe backdrop badger bail balance bamboo bangle banquette bargain barracks "
    "baseboard basketball bathrobe battleship beancurd beating beech begonia belfry bench beverage bidet "
    "billion bird bite blackness blend blocker blouse board bolero bone bookcase boost borrower bottom "
    "bout box bra brand break breeze briefing broccoli brood browsing buckle bug bulldozer bunkhouse "
    "burrito bust buy cabinet caffeine calendar camel campus candy canteen capitalism car cardboard "
    "carnival carriage cartload cashew castanet catamaran catsup caviar cellar center cereal chainstay "
    "chalk change characteristic charset chatter cheddar chemical chick chili chipmunk cholesterol chow "
    "chub cilantro circumference city clank classification clay clergyman clinic clogs clothes clue coat "
    "coconut cofactor coinsurance collar college colony combination comics commission communication "
    "compassion completion comportment comptroller conception condor configuration congress consensus "
    "consistency constraint contagion continuity contributor conversion coonskin copying cormorant "
    "corporation corsage cougar counselling country courthouse cowbell craft craw creationist credibility "
    "crewmate crime criticism croup crumb cub culture cure curriculum custard cutting cynic dahlia dance "
    "darn dawn dealing decade decline deduction defense delight denim dependent deputy desert destination "
    "detective development diabetes diamond dictator difficulty dignity dinghy dipstick disadvantage "
    "disclosure discrimination dish disposer distinction diversity doc doe dollop donkey dory doughnut "
    "downturn drain drawer drill dromedary duck dugout duration dwelling ear earthquake ecclesia ectoderm "
    "edition effectiveness eggplant electrocardiogram elicit elongation embryo emotion emu end "
    "enforcement enrollment entrepreneur ephemera epoxy era espadrille estrogen eurocentrism everyone "
    "exam excess executor exit experience explosion exterior eyebrows eyrie factor faith fan farrow "
    "faucet fear feed fen ferryboat fibroblast fifth fill financing finisher fish fit flanker fledgling "
    "flintlock flower flytrap folk fool footstool forebear forgery formicarium foundation fraction "
    "freckle freon frigate frost fulfillment funeral gadget gallon gap gas gather gear gender genius "
    "gerbil gigantism girlfriend glee glory gnu godparent good gorilla grade grammar grandmother "
    "grapefruit gravel green grin grouse guerrilla guilt gunpowder habit hake hamburger handicap "
    "happening hardhat harmony hassock haunt hazelnut health heartwood hedgehog hellcat hepatitis herring "
    "high hip hive hole homogenate honor horde horst host house howard human hunger hurt hydraulics "
    "hydroxyl ice id ignorance image impairment impostor inability incidence incubation industrialisation "
    "infection info inheritance injury innovation insight instant instrumentation integrity interchange "
    "interloper interviewer inventory invite irrigation ivory jailhouse jeep jewellery jogging joy jumbo "
    "junket karate ketch kick kilometer kingfish kitty knock label lacquerware lamb landmine laptop "
    "lashes laugh lawyer leaf leaver legend lemon leopard lever licence life lightscreen limestone "
    "linguistics lipoprotein literate living lobby locket login look lotion loyalty lunchroom lymphocyte "
    "macaroon maelstrom maiden mainstream makeup mama mandarin manicure mansion maple margin marketer "
    "marshland massage matchmaker mattock meal measurement medal melatonin memorial merchandise message "
    "meteorology mezzanine midline milepost millimeter mind mining minute misplacement mistake moai mochi "
    "molar monasticism monopoly moon morbidity mortise motivation mouse movie multimedia music mutton "
    "nanoparticle nature need neighbourhood nestmate neuron nexus night nit nonconformist normalisation "
    "nothing nucleotidase nun nutrition oats oboe occurrence odometer officer omega opening opossum "
    "optimist orchid organising ornament outback outline oval overhead owl pace paddock painting pan "
    "pansy panty parachute paranoia park parsnip partridge passive pastry pathogenesis patrimony pattypan "
    "payment peanut peer pendant pentagon perch permafrost personality petticoat pheromone photograph "
    "physiology pickle piety pile pimp pink pipe pitcher plagiarism plantation platform playwright plight "
    "plum pod poisoning policy polo pony population porter possible potato poverty precedence pregnancy "
    "preparation president pretzel priesthood printer privilege proceedings product progenitor "
    "proliferation propaganda proprietor prostrate provision psychiatrist publicity pulley punch purchase "
    "push qualification query quill quote racist raft raiment raisin rancher raspberry raven reaction "
    "realm recall recipe reconsideration red reference refusal registry reject relief remote repayment "
    "reporting request reserve resolution rest retailer retrospective revenant revival rhyme ridge rip "
    "riverbed robot roller rope route rubric rule running sack sage salami salt sanctuary sari saucer "
    "saviour scalp scenery scholar scissors scow screenwriting sculpting seaplane secrecy security "
    "selection semiconductor sensitive septicaemia servant setting shade shampoo shear shelter ship shoe "
    "shootdown shorts shred sideboard sight signup silo singer sitar ski skunk slash sleepiness slip "
    "smelting smuggling sneakers snowman soap soda sole solvency son soprano sound souvenir spaghetti "
    "spat special spectrum spending spinach spleen spool sprag sprinter square stable stair stamp "
    "standpoint station stealth step sticker stitcher stop storyboard straw stretch structure stuff "
    "stylus submarine subsidiary succotash suicide summer sunflower superiority supply surgeon survey "
    "sustenance sweatshirt swine swordfish synergy tabernacle tactics takeover tan tapioca tatami tea "
    "technician telephone temperature tendency tent terminology terrorism textbook theme thesis thong "
    "thrift thump tick tilt timing tissue toe tolerant tonality toothbrush tornado touch townhouse tract "
    "trafficker trait transit transportation tray trellis tributary tripod trouble trust tuber tune "
    "turning tutu twist ultimatum underneath underweight unique upper user vaccine valuable variability "
    "vaulting veil veneer verb verve viability victory vinegar violet vision vitro volatility voter wagon "
    "wake walnut warfare warrior waste watercress waveform weather weed welcome whale whirlwind "
    "wholesaler wild wind wingman wisdom wok woodland workbench world wraparound wriggler yahoo year "
    "yogurt yurt zinc zucchini"
).split()


@lru_cache(maxsize=1)
def line_index_vocabulary() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The (adjectives, nouns) from which line indices ``"{adjective}-{noun}"`` are drawn.

    Uses wonderwords' own adjective and noun lists when wonderwords is installed (upstream LongEval drew
    indices with ``wonderwords.RandomWord``); otherwise a frozen subset of those lists shipped here. Words
    are kept as in the lists (a few contain spaces or hyphens, as upstream's indices could), duplicates
    are dropped and order is preserved so that seeded sampling is reproducible.
    """
    try:
        from importlib.resources import files

        assets = files("wonderwords.assets")
        adjectives = assets.joinpath("adjectivelist.txt").read_text(encoding="utf-8").splitlines()
        nouns = assets.joinpath("nounlist.txt").read_text(encoding="utf-8").splitlines()
    except (ImportError, FileNotFoundError, OSError):
        adjectives, nouns = list(_FROZEN_ADJECTIVES), list(_FROZEN_NOUNS)

    def clean(words: list[str]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(w.strip() for w in words if w.strip()))

    return clean(adjectives), clean(nouns)


def lines_prompt(pairs: list[tuple[str, int]], query_idx: str, fmt: str = "longeval") -> str:
    """The LongEval lines prompt for ``pairs`` of (line index, REGISTER_CONTENT), asking for ``query_idx``.

    docs/design.md §10: header, then one ``"line {idx}: REGISTER_CONTENT is <{n}>\\n"`` per pair, then the
    question. ``query_idx`` must be one of the indices; ``fmt`` picks the header (:data:`FORMATS`).
    """
    if query_idx not in {idx for idx, _ in pairs}:
        raise ValueError(f"query_idx {query_idx!r} is not a line index of the record")
    body = "".join(LINE_TEMPLATE.format(idx=idx, n=n) for idx, n in pairs)
    return FORMATS[fmt] + body + QUESTION_TEMPLATE.format(idx=query_idx)


@dataclass(frozen=True)
class LinesCase:
    """One lines example: the record's (index, value) pairs and which line is asked for."""

    pairs: tuple[tuple[str, int], ...]
    query: int  # position of the asked line in ``pairs``
    fmt: str = "longeval"  # the header (:data:`FORMATS`)

    @property
    def query_idx(self) -> str:
        """The index of the asked line, e.g. ``"swift-river"``."""
        return self.pairs[self.query][0]

    @property
    def answer(self) -> int:
        """The REGISTER_CONTENT of the asked line (the expected number)."""
        return self.pairs[self.query][1]

    @property
    def prompt(self) -> str:
        """The full prompt of this case."""
        return lines_prompt(list(self.pairs), self.query_idx, self.fmt)


def filled_prompt(case: LinesCase, where: list[float], sentences: int) -> str:
    """The prompt of ``case`` with ``sentences`` filler sentences around its lines, line j at depth ``where[j]``
    (:func:`lengthx.tasks.lines_records.filled_body`); with none, the benchmark's prompt of its lines."""
    lines = [LINE_TEMPLATE.format(idx=idx, n=n) for idx, n in case.pairs]
    return FORMATS[case.fmt] + filled_body(lines, where, sentences) + QUESTION_TEMPLATE.format(idx=case.query_idx)


def random_line_indices(n: int, rng: random.Random) -> list[str]:
    """``n`` adjective-noun line indices drawn with ``rng`` as LongEval's ``generate_line_index`` ("LRT-NL") draws
    them: ``n`` adjectives and ``n`` nouns, each *without replacement* (wonderwords' ``random_words``), paired in
    order, so no adjective and no noun appears twice in a record.

    Each list is shuffled whole and its first ``n`` words are taken, so the indices of a shorter record are a
    prefix of a longer one's (what :func:`lines_case_at` relies on)."""
    adjectives, nouns = line_index_vocabulary()
    most = min(len(adjectives), len(nouns))
    if n > most:
        raise ValueError(f"a record of {n} lines needs {n} distinct adjectives and nouns, but the vocabulary has "
                         f"{len(adjectives)} adjectives and {len(nouns)} nouns (install wonderwords for its full "
                         "lists)")
    adjectives, nouns = list(adjectives), list(nouns)
    rng.shuffle(adjectives)
    rng.shuffle(nouns)
    return [f"{a}-{b}" for a, b in zip(adjectives[:n], nouns[:n], strict=True)]


def lines_case(n_lines: int, rng: random.Random, fmt: str = "longeval") -> LinesCase:
    """One case with ``n_lines`` lines: indices without a repeated word, values uniform in 1..50000, asked line
    uniform; its prompt in ``fmt``."""
    if n_lines < 1:
        raise ValueError("n_lines must be at least 1")
    indices = random_line_indices(n_lines, rng)
    pairs = tuple((idx, rng.randint(1, MAX_VALUE)) for idx in indices)
    return LinesCase(pairs=pairs, query=rng.randrange(n_lines), fmt=fmt)


def lines_cases(n: int, n_lines: int, seed: int) -> list[LinesCase]:
    """``n`` seeded cases of ``n_lines`` lines each; the same seed gives the same cases everywhere."""
    rng = random.Random(seed)
    return [lines_case(n_lines, rng) for _ in range(n)]


def lines_case_at(n_lines: int, seed: int, fmt: str = "longeval") -> LinesCase:
    """The case of ``n_lines`` lines drawn from ``random.Random(seed)``.

    For one seed, the line indices of the case with ``n`` lines are the first ``n`` of the case with more
    lines (values and the asked line are redrawn), so its token count grows with ``n_lines``; this is what
    makes fitting by bisection (``fit_lines_case``) well defined.
    """
    return lines_case(n_lines, random.Random(seed), fmt)


def fit_lines_case(
    seed: int, count_tokens: Callable[[str], int], max_tokens: int, max_lines: int = 2000, fmt: str = "longeval"
) -> LinesCase:
    """The case of ``seed`` with the most lines whose prompt has at most ``max_tokens`` tokens.

    ``count_tokens`` counts a prompt's tokens with the model's own tokenizer (docs/design.md §6: lengths are
    token-exact, never characters). Bisection on the number of lines in ``[1, max_lines]`` (at most as many as
    the vocabulary has adjectives and nouns); the asked line
    stays uniform over the kept lines. Raises ``ValueError`` if even one line does not fit.
    """
    if count_tokens(lines_case_at(1, seed, fmt).prompt) > max_tokens:
        raise ValueError(f"a one-line record already exceeds {max_tokens} tokens")
    max_lines = min(max_lines, *map(len, line_index_vocabulary()))  # no word repeats within a record
    # hi = max_lines + 1 stands for "past max_lines", never tried
    lo = bisect_largest(lambda n: count_tokens(lines_case_at(n, seed, fmt).prompt) <= max_tokens, 1, max_lines + 1)
    return lines_case_at(lo, seed, fmt)


def case_seed(seed: int, i: int) -> int:
    """The seed of example ``i`` of a run seeded ``seed`` (distinct for every (seed, i) below 10^6 cases).

    Each example has its own seed, so example ``i`` is the same whatever the other examples or the
    setting: at 200 and at 300 lines its indices are prefixes of one sequence (``lines_case_at``)."""
    return seed * 1_000_003 + i


# draws of an example's K lines tried before ``task.num_lines=K`` is refused as not fitting a setting
MAX_DRAWS = 200


def draw_seed(seed: int, draw: int) -> int:
    """The case seed of draw ``draw`` of the example whose own seed is ``seed`` (draw 0: ``seed`` itself); distinct
    from every :func:`case_seed` below 2^48."""
    return seed + (draw << 48)


def count_problem(task_cfg: Any, profile: str) -> str | None:
    """Why ``task.format`` / ``task.num_lines`` cannot run, or ``None``: :func:`lengthx.tasks.base.count_knob_problem`,
    and no more lines than the line-index vocabulary has distinct keys."""
    problem = count_knob_problem(task_cfg, profile, "lines", "num_lines", "lines", FORMATS)
    k = task_cfg.get("num_lines")
    if problem or k is None:
        return problem
    most = min(map(len, line_index_vocabulary()))
    if k > most:
        return f"task.num_lines={k}: the line-index vocabulary holds {most} distinct keys. Fix: a smaller count"
    return None


class LinesTask(Task):
    """LongEval lines: seeded records of ``line <idx>: REGISTER_CONTENT is <n>``, last-integer scoring; with
    ``testcases_dir``, LongEval's released cases (:mod:`lengthx.tasks.longeval_testcases`)."""

    name = "lines"
    metrics = ("accuracy",)
    units = ("lines", "tokens")  # what task.unit may name (the unit of explicit task.settings)

    def __init__(self, max_new_tokens: int = 100, max_lines: int = 2000, testcases_dir: str | None = None,
                 seed: int = 0, prompt_format: str = "longeval", num_lines: int | None = None):
        if prompt_format not in FORMATS:
            raise ValueError(f"task.format={prompt_format}: no such lines format. Fix: one of {', '.join(FORMATS)}")
        self.max_new_tokens, self.prompt_format = max_new_tokens, prompt_format
        self.max_lines, self.num_lines = max_lines, num_lines
        self.testcases_dir, self.seed = testcases_dir, int(seed)
        self.l_tr: int | None = None  # the model's, once known (set_training_length)

    @classmethod
    def from_config(cls, task_cfg: Any, profile: str = "mini") -> LinesTask:
        """The task from its Hydra config (``conf/task/lines.yaml``)."""
        k = task_cfg.get("num_lines")
        return cls(max_new_tokens=int(task_cfg.max_new_tokens), testcases_dir=task_cfg.get("testcases_dir"),
                   seed=int(task_cfg.get("seed") or 0), prompt_format=str(task_cfg.get("format") or "longeval"),
                   num_lines=None if k is None else int(k))

    @staticmethod
    def data_problem(task_cfg: Any, profile: str, settings: list[Setting] | None = None) -> str | None:
        """Why ``task.testcases_dir`` cannot give every setting its released cases, or why ``task.format`` /
        ``task.num_lines`` cannot run (:func:`count_problem`), or ``None``."""
        return testcases_problem(task_cfg, "lines", "lines", settings) or count_problem(task_cfg, profile)

    def _released(self, setting: Setting) -> Path | None:
        """The released file a setting evaluates, or ``None`` (records generated)."""
        if self.testcases_dir and setting.unit == "lines":
            return testcase_path(self.testcases_dir, "lines", setting.value)
        return None

    def data_source(self, setting: Setting) -> str:
        """The released test-case file (name and hash), or ``synthetic``: generated records, as LongEval's own
        generator makes them (lengthx.data.provenance)."""
        path = self._released(setting)
        return file_label(path) if path is not None else SYNTHETIC

    def examples(self, setting: Setting, tokenizer: PreTrainedTokenizerBase, n: int, seed: int) -> list[Example]:
        """``n`` examples at ``setting`` (a number of lines, or a token count fitted by bisection).

        With ``testcases_dir`` a setting of N lines evaluates the first ``n`` cases of ``{N}_lines.jsonl`` at the
        task's own seed; any other seed (Algorithm 1's calibration records) draws generated records."""
        path = self._released(setting)
        if path is not None and seed == self.seed:
            return self._released_examples(path, tokenizer, n, seed)
        out = []
        for i in range(n):
            s = case_seed(seed, i)
            meta: dict[str, Any] = {}
            prompt: str | None = None  # set by the fixed-count branch; else the case's own prompt
            if setting.unit == "lines":
                case, requested = lines_case_at(setting.value, s, self.prompt_format), None
            elif setting.unit == "tokens" and self.num_lines is not None:
                requested, where = setting.value, depths(self.num_lines, s)
                case, draw = self.fitting_draw(tokenizer, s, requested, f"task.num_lines={self.num_lines}, example {i}")
                prompt, sentences = fill_to(partial(filled_prompt, case, where),
                                            lambda p: count_tokens(tokenizer, p), requested)
                meta = {"filler_sentences": sentences, "query_depth": round(where[case.query], 4),
                        **({"redraws": draw} if draw else {})}
            elif setting.unit == "tokens":
                requested = setting.value
                case = fit_lines_case(s, lambda p: count_tokens(tokenizer, p), requested, self.max_lines,
                                      self.prompt_format)
            else:
                raise ValueError(f"lines settings are in lines or tokens, not {setting.unit!r}")
            prompt = case.prompt if prompt is None else prompt
            out.append(Example(f"{seed}-{i}", prompt, case.answer, requested, count_tokens(tokenizer, prompt),
                               {"n_lines": len(case.pairs), "query_idx": case.query_idx,
                                "query_position": case.query, **meta}))
        return out

    def set_training_length(self, l_tr: int) -> None:
        """The model's L_tr: ``num_lines`` records are drawn to fit it (:meth:`fitting_draw`)."""
        self.l_tr = int(l_tr)

    def fitting_draw(self, tokenizer: PreTrainedTokenizerBase, seed: int, target: int, who: str) -> tuple[LinesCase, int]:
        """The example's case at a setting of ``target`` tokens, and its draw's number: the first of its draws
        (:func:`draw_seed` of its own ``seed``; draw 0 is its own) whose ``num_lines`` lines fit, without filler,
        the smaller of ``target`` and the model's L_tr; where no draw of :data:`MAX_DRAWS` fits L_tr (more lines than
        it holds), the first that fits ``target``. An example whose own lines fit is used as drawn, and wherever K
        lines fit L_tr, example i is the same draw at every length from L_tr up (docs/usage.md, ``task.num_lines``).
        ``ValueError`` naming ``who`` when no draw fits ``target``."""
        drawn: list[tuple[LinesCase, int]] = []  # (case, its tokens without filler) of each draw tried so far
        for fit in dict.fromkeys((min(target, self.l_tr or target), target)):
            for draw in range(MAX_DRAWS):
                if draw == len(drawn):
                    case = lines_case_at(int(self.num_lines), draw_seed(seed, draw), self.prompt_format)
                    drawn.append((case, count_tokens(tokenizer, case.prompt)))
                if drawn[draw][1] <= fit:
                    return drawn[draw][0], draw
        need = min(tokens for _, tokens in drawn)
        raise ValueError(f"{who}: none of {MAX_DRAWS} draws of {self.num_lines} lines fits {target} tokens without "
                         f"filler (header, lines, question; the shortest needs {need}). Fix: a setting of at least "
                         "that many tokens, or a smaller task.num_lines")

    def count_problem_at(self, tokenizer: PreTrainedTokenizerBase, target: int,
                         draws: tuple[int, int] | None = None) -> str | None:
        """Why ``num_lines`` lines cannot fit ``target`` tokens, or ``None``: the first ``n`` examples of ``seed``
        (``draws`` = (seed, n); without it, the first 50 of the task's seed), each needing a draw that fits without
        filler (:meth:`fitting_draw`), as a run builds them."""
        if self.num_lines is None:
            return None
        seed, n = draws or (self.seed, 50)
        try:
            for i in range(n):
                self.fitting_draw(tokenizer, case_seed(seed, i), target,
                                  f"task.num_lines={self.num_lines}: example {i} of task.seed={seed}")
        except ValueError as err:
            return str(err)
        return None

    def _released_examples(self, path: Path, tokenizer: PreTrainedTokenizerBase, n: int, seed: int) -> list[Example]:
        """The first ``n`` released cases of ``path``: their prompts as they are, their expected numbers."""
        rows = read_testcases(path, "lines")
        if n > len(rows):
            raise ValueError(f"{path} holds {len(rows)} test cases; task.num_examples={n} asks for more")
        out = []
        for i, row in enumerate(rows[:n]):
            asked = row.get("random_idx") or [None, None]
            out.append(Example(f"{seed}-{i}", row["prompt"], int(row["expected_number"]), None,
                               count_tokens(tokenizer, row["prompt"]),
                               {"n_lines": row.get("num_lines"), "query_idx": asked[0], "query_position": asked[1],
                                "testcase": f"{path.name}:{row['_line']}"}))
        return out

    def score(self, output: str, example: Example) -> dict[str, float]:
        """100 when the last integer of the output is the asked line's number, else 0 (LongEval's ``eval.py``)."""
        return {"accuracy": 100.0 * lines_correct(output, example.target)}
