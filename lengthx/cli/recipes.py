"""The jobs that produced a results directory's cells (docs/results.md): the commands of the Makefile's recipes
(:data:`MINI_RECIPES`), and jobs read back off the rows (:func:`row_jobs`: model, method, task, setting, L_tr, seed
and example count, under each dtype and calibration count a row does not name). A tool that carries cells to new
hashes without recomputing them (``lengthx.cli.rescore``) recomputes each candidate job's hashes and matches them to
the stored ones.
"""

from __future__ import annotations

import re
import shlex

from lengthx.cli.common import sweep_jobs
from lengthx.core.cells import TEMPERATURE_METHODS
from lengthx.core.store import ResultsStore
from lengthx.tasks import TASKS

# The commands of the Makefile's reproduce-mini (AA_MINI_RECIPE, SB_RECIPE and the τ-vs-segmented experiment), its
# demo, and the earlier recipes the committed results were made with; ``task.only`` and ``experiment`` never
# enter a hash, so the column slices are left out.
MINI_RECIPES = (
    "stats -m experiment=aa_table1 task=topics,lines,passkey,mdqa",
    "stats -m model=mini-t5-lm task=lm,code_completion",
    "run -m experiment=aa_table4 calibration.num_examples=1",
    "run -m experiment=aa_table4 task=passkey method=yarn,longrope calibration.num_examples=1",
    "run -m experiment=aa_table5 calibration.num_examples=1",
    "run -m experiment=aa_table3 task.num_examples=100 calibration.num_examples=4",
    "run -m experiment=aa_table6 task.num_examples=60 calibration.num_examples=4",
    "run -m experiment=aa_code_key task.num_examples=60 calibration.num_examples=4",
    "run -m experiment=aa_table3 method=prop1,prop2 task.num_examples=100 calibration.num_examples=4",
    "run -m experiment=aa_table3 method=pmax,entropy ++method.per_layer=true ++method.search=bisect "
    "task.num_examples=100 calibration.num_examples=4",
    "run -m experiment=aa_table3 method=yarn,longrope task.num_examples=100 calibration.num_examples=4",
    "run -m task=passkey method=none,pmax task.num_examples=4 calibration.num_examples=1",
    "run -m experiment=sb_table2 profile=mini",
    "run -m experiment=sb_table3 profile=mini",
    "run -m experiment=sb_table4 profile=mini",
    "run -m experiment=sb_table5 profile=mini",
    "run -m experiment=ext_tau_vs_segmented",
    "run -m profile=mini task=segmented_ppl model=gpt2,pythia-160m,gpt2-xl,pythia-1.4b,bloom-1b1 "
    "task.factors=[1,2,3,4,5] task.attention_medians=4 task.num_examples=60 task.text_factor=5",
    "run -m profile=mini task=segmented_ppl model=gpt2,pythia-160m task.run=full-2x,full-4x,chunk-0.125-2x,"
    "chunk-0.125-4x,chunk-0.25-2x,chunk-0.25-4x,chunk-0.5-2x,chunk-0.5-4x,prefix-0.25-2x,prefix-0.25-4x,"
    "prefix-0.5-2x,prefix-0.5-4x task.num_examples=60 task.text_factor=5",
    "run -m profile=mini task=segmented_ppl model=gpt2-xl,pythia-1.4b,bloom-1b1 task.run=chunk-0.25-2x,"
    "chunk-0.25-4x task.attention_medians=4 task.num_examples=60 task.text_factor=5",
    "run -m profile=mini task=segmented_ppl model=gpt2-xl,bloom-1b1 task.run=da-1x task.num_examples=60 "
    "task.text_factor=5",
)

ALIGNED_METHODS = ("pmax", "entropy", "prop1", "prop2")  # methods whose τ goes through Algorithm 1's cache
# calibration.num_examples values tried for a row's job (None: the profile's)
CALIBRATION_COUNTS = (None, 1, 2, 4, 5)
# dtype values tried for a row's job (a row does not name the one it ran under)
DTYPES = ("auto", "float32", "bfloat16")


METHOD_ID = re.compile(r"(?P<name>fixed-(?P<tau>[^-]+)|[a-z0-9]+)(?:-scope=(?P<scope>[a-z_]+))?"
                       r"(?P<per_layer>-per-layer)?(?:-(?P<search>[a-z]+))?")
EXPLICIT_LABEL = re.compile(r"(?P<value>\d+)(?P<unit>[a-z]+)")  # lengthx.tasks.base.explicit_label


def method_overrides(method: str) -> list[str] | None:
    """The overrides that give ``method`` (an id of :func:`lengthx.core.cells.method_id`), or None for a label
    that is not a temperature method (paper B's, ``stats``)."""
    m = METHOD_ID.fullmatch(method)
    name = m and ("fixed" if m["tau"] else m["name"])
    if not m or name not in (*TEMPERATURE_METHODS, "truncation"):
        return None
    out = [f"method={name}"] + ([f"method.tau={m['tau']}"] if m["tau"] else [])
    out += [f"method.scope={m['scope']}"] if m["scope"] else []
    out += ["++method.per_layer=true"] if m["per_layer"] else []
    return out + ([f"++method.search={m['search']}"] if m["search"] else [])


def row_jobs(store: ResultsStore, extra: list[str] = ()) -> list[tuple[str, list[str]]]:
    """Candidate jobs of paper A's rows: the model, method and task as the row names them, its setting (an
    explicit one as ``task.settings``), L_tr and seed, ``task.num_examples`` unset or the row's ``n``, each dtype
    of :data:`DTYPES`, for an aligned method each of :data:`CALIBRATION_COUNTS`, then ``extra`` overrides
    (``stats`` rows: ``lengthx stats`` at τ = 1)."""
    df = store.read()
    if df.empty:
        return []
    jobs: list[tuple[str, list[str]]] = []
    seen = df[df["status"] == "ok"].drop_duplicates(["model", "method", "task", "setting", "n", "L_tr", "seed"])
    for r in seen.itertuples():
        task = TASKS.get(r.task)  # None: a row of a task this version of lengthx does not have
        if task is not None and task.scoring == "perplexity":
            continue  # paper B's jobs carry knobs the rows do not name: MINI_RECIPES has them
        base = [f"model={r.model}", f"task={r.task}"]
        if str(r.L_tr) not in ("", "nan"):
            base.append(f"model.l_tr={int(float(r.L_tr))}")
        if str(r.seed) not in ("", "nan"):
            base.append(f"task.seed={int(float(r.seed))}")
        label = EXPLICIT_LABEL.fullmatch(str(r.setting))
        if label and task is not None and label["unit"] in task.units:
            base += [f"task.settings=[{label['value']}]", f"task.unit={label['unit']}"]
        if r.method == "stats":
            jobs += [("stats", [*base, f"dtype={d}", *extra]) for d in DTYPES]
            continue
        method = method_overrides(str(r.method))
        if method is None:
            continue
        counts = CALIBRATION_COUNTS if method[0].split("=")[1] in ALIGNED_METHODS else (None,)
        for examples in (None, int(r.n)):
            for cal in counts:
                for dtype in DTYPES:
                    jobs.append(("run", [*base, *method, f"dtype={dtype}",
                                         *([f"task.num_examples={examples}"] if examples is not None else []),
                                         *([f"calibration.num_examples={cal}"] if cal is not None else []),
                                         *extra]))
    return jobs


def recipe_jobs(commands: tuple[str, ...] | list[str]) -> list[tuple[str, list[str]]]:
    """The jobs of ``lengthx <command>`` lines (``-m`` sweeps expanded as Hydra expands them)."""
    jobs = []
    for line in commands:
        command, *args = shlex.split(line)
        _, expanded = sweep_jobs([a for a in args if a not in ("-m", "--multirun")])
        jobs += [(command, job) for job in expanded]
    return jobs
