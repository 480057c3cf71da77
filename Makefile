# lengthx — set-up, tests, the demo and the reproductions. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
LX     := $(BIN)/lengthx
export HF_HUB_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false
# The suite runs in one process per core (pytest-xdist, at most 4), each test file in one of them, one thread each.
PYTEST_PARALLEL ?= -n auto --maxprocesses 4 --dist loadfile

.PHONY: gpu-study-carry gpu-lookup-carry install test test-artifacts test-slurm test-fast test-triton demo bench gpu-wheels bench-gpu tables reproduce-mini reproduce-mini-a reproduce-mini-b reproduce-all mini-t5 mini-t5-lm mini-t5-lm-study mini-t5-study mini-t5-counts-study mini-t5-lines-study mini-t5-lookup-study mini-t5-lookup-report lint clean

install: $(VENV)/.installed

# torch is pinned first; pyproject says torch>=2.6 so GPU users keep their own build. Which build the pin gets is
# the index's: on plain PyPI for Linux, torch==2.13.0 is the CUDA build (several GB of nvidia-* packages); the
# CPU-only build is one setting away: make install TORCH_INDEX=https://download.pytorch.org/whl/cpu (a machine
# whose pip configuration already serves the CPU wheel, as CI's, needs none).
TORCH_INDEX ?=
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# pytest exits 5 when it collects no test; that is not a failure of the suite.
# The architecture contracts first (pyproject [tool.importlinter]: layers, paper A ⟂ paper B, the store through its face, no cycles).
test: install
	$(BIN)/lint-imports
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest tests -m "not slurm" $(PYTEST_PARALLEL); rc=$$?; if [ $$rc -eq 5 ]; then exit 0; else exit $$rc; fi

# The cluster path through sbatch on a one-node SLURM cluster on 127.0.0.1 (tests/test_slurm.py; docs/cluster.md):
# skipped, naming what is missing, without slurm-wlm, munge and root. .ci/run installs them and runs this after `test`.
test-slurm: install
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest tests/test_slurm.py -m slurm; rc=$$?; if [ $$rc -eq 5 ]; then exit 0; else exit $$rc; fi

# The checks of committed results, checkpoints, studies and docs alone (tests/artifacts/README.md); `make test` runs
# them with the code tests.
test-artifacts: install
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest tests/artifacts $(PYTEST_PARALLEL); rc=$$?; if [ $$rc -eq 5 ]; then exit 0; else exit $$rc; fi

# The inner loop: the same, without the tests marked slow.
test-fast: install
	$(BIN)/lint-imports
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest tests -m "not slow" $(PYTEST_PARALLEL); rc=$$?; if [ $$rc -eq 5 ]; then exit 0; else exit $$rc; fi

# The Triton statistics kernel (attention.stats_backend=triton) in triton's CPU interpreter at small shapes
# (docs/gpu.md): installs the gpu extra (triton) into the venv first; on a GPU the same files run compiled.
test-triton: install
	$(BIN)/pip install -q -e '.[gpu]'
	TRITON_INTERPRET=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q tests/test_triton_stats.py \
		tests/test_bench_gpu_triton.py

# The main job on a demo-sized slice: the Flan-T5 stand-in on LongEval topics (paper A, Table 4) in records of
# exactly DEMO_K conversations, a count it handles at L_tr, at its training length and at DEMO_LENGTH tokens (10x
# L_tr); τ = 1 beside P_max (Algorithm 1, 1 calibration example), 60 examples each. The slice was chosen on τ = 1
# alone: the shipped snapshot's largest fall of τ = 1 against L_tr among K = 1, 3, 5 at 4x and 10x L_tr
# (results/mini-t5-counts/study.md). The summary ends with one reading: intervals, the conversations the records
# hold, and τ = 1 at L_tr at the same count. Cells resume.
DEMO_K ?= 5
DEMO_LENGTH ?= 2560
# Its own results place, so that its summary shows the demo's cells, not every run of results/local.
DEMO_RESULTS ?= results/local/demo
DEMO_ARGS ?= task=topics task.unit=tokens task.num_examples=60 task.num_topics=$(DEMO_K) results_dir=$(DEMO_RESULTS)
demo: install
	$(LX) run $(DEMO_ARGS) 'task.settings=[256,$(DEMO_LENGTH)]' method=none
	$(LX) run $(DEMO_ARGS) 'task.settings=[$(DEMO_LENGTH)]' method=pmax calibration.num_examples=1
	$(LX) tables --summary --results-dir $(DEMO_RESULTS)

# results.csv at a lab's size is timed beside the code before the fourth fault round's fixes (BENCH_SCALE_BEFORE;
# empty: this checkout alone), whose slowest command is stopped after BENCH_SCALE_LIMIT CPU seconds.
BENCH_SCALE_BEFORE ?= 4e43e77
BENCH_SCALE_LIMIT ?= 120
bench: install
	$(BIN)/python scripts/bench/bench_cli_startup.py
	$(BIN)/python scripts/bench/bench_attention.py
	$(BIN)/python scripts/bench/bench_alignment.py
	$(BIN)/python scripts/bench/bench_algorithm1.py
	$(BIN)/python scripts/bench/bench_training_memory.py
	$(BIN)/python scripts/bench/bench_token_ids.py
	$(BIN)/python scripts/bench/bench_results_scale.py --rounds 1 $(if $(BENCH_SCALE_BEFORE),--compare-commit $(BENCH_SCALE_BEFORE) --compare-limit $(BENCH_SCALE_LIMIT))

# Pure-Python packages a bare GPU machine may lack (docs/gpu.md), as wheels in .whl/ (git-ignored): the configs' and
# tasks' packages, transformers at this venv's version, and datasets with what the machine's image lacks of it
# (paper B's training in scripts/bench/gpu/bench_gpu_cells.py); multiprocess, and code completion's rapidfuzz and
# tree-sitter (with its Python grammar), are built per Python version: the machine's 3.12
VERSION = $$($(BIN)/python -c "import importlib.metadata as m; print(m.version('$(1)'))")
gpu-wheels: install
	$(BIN)/python -m pip wheel -q --no-deps -w .whl wonderwords==3.0.1 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3 \
		hydra-core==1.3.8 $(foreach p,transformers datasets dill fsspec,$(p)==$(call VERSION,$(p)))
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any -d .whl \
		$(foreach p,multiprocess rapidfuzz tree-sitter tree-sitter-python,$(p)==$(call VERSION,$(p)))

# The carry of scripts/gpu_runs/gpu_study.sh (docs/gpu.md): SNAPSHOTS="seed0/step-00300 ..." of STUDY_DIR/snapshots, the
# tokenizer most of them share once (a snapshot with another keeps its own); STORES=1 adds their results stores to
# resume (stores.tar.gz); WORKERS="seed1/step-02400=5 ..." runs that many processes on a snapshot (workers.txt).
# `python scripts/studies/study_mini_t5_counts.py --pending` prints the line for the first-of-K study's pending cells.
STUDY_DIR ?= results/mini-t5-study
# The lookup study's resume points for a GPU call (docs/gpu.md, "The lookup study on a GPU"; gpu_runs/gpu_lookup.sh).
gpu-lookup-carry:
	rm -rf .device-carry/lookup
	for v in $(LOOKUP_VARIANTS); do d=results/mini-t5-lookup/train/$$v; test -f $$d/resume.pt || continue; \
		mkdir -p .device-carry/lookup/$$v && cp $$d/resume.pt $$d/curve.json .device-carry/lookup/$$v/ || exit 2; done
	du -sh .device-carry/lookup/*

gpu-study-carry:
	@test -n "$(SNAPSHOTS)" || { echo 'SNAPSHOTS is empty. Fix: make gpu-study-carry SNAPSHOTS="seed0/step-00300 ..."'; exit 2; }
	@for s in $(SNAPSHOTS); do test -f $(STUDY_DIR)/snapshots/$$s/README.md || { echo "$(STUDY_DIR)/snapshots/$$s: no snapshot there. Fix: name one of $$(cd $(STUDY_DIR)/snapshots && echo seed*/step-*)"; exit 2; }; done
	rm -rf .device-carry/study && mkdir -p .device-carry/study/snapshots
	cd $(STUDY_DIR)/snapshots && md5sum $(addsuffix /tokenizer.json,$(SNAPSHOTS)) | sort | uniq -c -w32 | sort -rn | \
		awk 'NR == 1 {print $$3}' | xargs -I{} cp {} $(CURDIR)/.device-carry/study/tokenizer.json
	for s in $(SNAPSHOTS); do \
		mkdir -p .device-carry/study/snapshots/$$s && cp $(STUDY_DIR)/snapshots/$$s/* .device-carry/study/snapshots/$$s/ && \
		if cmp -s .device-carry/study/snapshots/$$s/tokenizer.json .device-carry/study/tokenizer.json; then \
			rm .device-carry/study/snapshots/$$s/tokenizer.json; fi || exit 2; \
	done
	if [ "$(STORES)" = 1 ]; then cd $(STUDY_DIR) && tar czf $(CURDIR)/.device-carry/study/stores.tar.gz --exclude=.locks \
		--exclude=.cache --exclude=.results.lock $$(for s in $(SNAPSHOTS); do test -d $$s && echo $$s; done); fi
	for w in $(WORKERS); do echo "$${w%%=*} $${w##*=}" >>.device-carry/study/workers.txt; done
	du -sh .device-carry $(wildcard .whl)

# Both papers at the paper models' shapes on one GPU (about 10 minutes): results/bench/gpu.md
bench-gpu: install
	$(BIN)/python scripts/bench/gpu/bench_gpu.py

tables: install
	$(LX) tables

# Paper A on the mini profile, three stand-ins (lengthx/conf/model/mini-*.yaml):
# - mini-t5 (Flan-T5's stand-in, docs/mini-t5-study.md) runs topics and passkey (Tables 1, 4, 7, 9) at every
#   setting with AA_RETRIEVAL_EXAMPLES examples, and lines and MDQA (Tables 1, 5, 10) on each task's shortest and
#   longest setting (AA_MINI_SLICE= runs them all; MDQA adds 30docs@0, Table 10's column) with 10 examples;
#   1 calibration example for Algorithm 1; its lines cells run on mini-t5-lookup, the stand-in that does lines at
#   L_tr (docs/mini-t5-lookup.md; `task_minis` in mini-t5.yaml), the row keeping mini-t5's name;
# - mini-t5-lm (T5-LM's and CodeT5+'s stand-in, scripts/train_mini_t5_lm.py) runs language modelling and code
#   (Tables 3, 6, 8, 11-13, code key) at every setting, AA_LM_EXAMPLES / AA_CODE_EXAMPLES examples per setting
#   on the same text at every length (profile.same_text), 4 calibration examples, and Table 8's extension rows
#   (Props 1-2 as methods; per-layer Algorithm 1 by bisection).
# The method-none cells of `lengthx run task=<each> method=none` are reused; every line resumes (rerun to
# continue). A line whose cells fail exits 1 and stops the recipe, except Props 1-2 on the LM (`-`): Prop. 1 has no
# positive solution on mini-t5-lm (its cells are error rows, named at the end of that line), which is a result. AA_DRY_RUN=--dry-run lists the cells instead. Measured wall times are in README.md.
, := ,
AA_MINI_ARGS  ?= calibration.num_examples=1
AA_MINI_SLICE ?= 1
AA_RETRIEVAL_EXAMPLES ?= 60
AA_LM_ARGS    ?= calibration.num_examples=4
AA_LM_EXAMPLES   ?= 100
AA_CODE_EXAMPLES ?= 60
aa_only = $(if $(AA_MINI_SLICE),'task.only=[$(1)]')
define AA_MINI_RECIPE
$(LX) stats -m experiment=aa_table1 task=topics,passkey $(AA_DRY_RUN)
$(LX) stats -m experiment=aa_table1 task=lines $(call aa_only,200$(,)680) $(AA_DRY_RUN)
$(LX) stats -m experiment=aa_table1 task=mdqa $(call aa_only,10docs@0$(,)30docs@29) $(AA_DRY_RUN)
$(LX) stats -m model=mini-t5-lm task=lm,code_completion $(AA_DRY_RUN)
$(LX) run -m experiment=aa_table4 task=topics,passkey task.num_examples=$(AA_RETRIEVAL_EXAMPLES) $(AA_MINI_ARGS) $(AA_DRY_RUN)
$(LX) run -m experiment=aa_table4 task=lines $(call aa_only,200$(,)680) $(AA_MINI_ARGS) $(AA_DRY_RUN)
$(LX) run -m experiment=aa_table5 $(call aa_only,10docs@0$(,)30docs@0$(,)30docs@29) $(AA_MINI_ARGS) $(AA_DRY_RUN)
$(LX) run -m experiment=aa_table3 task.num_examples=$(AA_LM_EXAMPLES) $(AA_LM_ARGS) $(AA_DRY_RUN)
$(LX) run -m experiment=aa_table6 task.num_examples=$(AA_CODE_EXAMPLES) $(AA_LM_ARGS) $(AA_DRY_RUN)
$(LX) run -m experiment=aa_code_key task.num_examples=$(AA_CODE_EXAMPLES) $(AA_LM_ARGS) $(AA_DRY_RUN)
-$(LX) run -m experiment=aa_table3 method=prop1,prop2 task.num_examples=$(AA_LM_EXAMPLES) $(AA_LM_ARGS) $(AA_DRY_RUN)
$(LX) run -m experiment=aa_table3 method=pmax,entropy ++method.per_layer=true ++method.search=bisect task.num_examples=$(AA_LM_EXAMPLES) $(AA_LM_ARGS) $(AA_DRY_RUN)
$(LX) run -m experiment=aa_table3 method=yarn,longrope task.num_examples=$(AA_LM_EXAMPLES) $(AA_LM_ARGS) $(AA_DRY_RUN)
$(LX) run -m experiment=aa_table4 task=passkey method=yarn,longrope $(call aa_only,20k$(,)55k) $(AA_MINI_ARGS) $(AA_DRY_RUN)
$(LX) run -m model=mini-t5 method=none task=topics,lines,passkey,mdqa 'task.settings=[$(AA_LTR_T5)]' task.unit=tokens task.num_examples=$(AA_RETRIEVAL_EXAMPLES) $(AA_DRY_RUN)
$(LX) run -m model=mini-t5-lm method=none task=lm 'task.settings=[$(AA_LTR_T5_LM)]' task.unit=tokens task.num_examples=$(AA_LM_EXAMPLES) $(AA_DRY_RUN)
$(LX) run -m model=mini-t5-lm method=none task=code_completion,code_key 'task.settings=[$(AA_LTR_T5_LM)]' task.unit=tokens task.num_examples=$(AA_CODE_EXAMPLES) $(AA_DRY_RUN)
endef
# The L_tr column of every paper A table on the mini profile: each stand-in at its own training length (method none,
# the same task and format; lengthx/conf/model/mini-t5*.yaml's l_tr), the cells the tables set beside the long ones.
AA_LTR_T5 ?= 256
AA_LTR_T5_LM ?= 128

# Paper B: one experiment per table (lengthx/conf/experiment/sb_table*.yaml): each job scores one training run
# of one model at L_t…5L_t (task=segmented_ppl) and first trains what it needs, OOTB (one epoch of domain
# adaptation from the published checkpoint, paper B §4.3) before the methods that start from it. Every step
# resumes: a finished run or cell is skipped, an interrupted one continues from its last checkpoint or record.
# The mini profile adapts the decoder minis (pre-trained on code) to English prose (lengthx/corpora/) and scores prose.
# SB_DRY_RUN=--dry-run lists each job's training and cells instead.
SB_DRY_RUN ?=
define SB_RECIPE
$(LX) run -m experiment=sb_table2 profile=$(1) $(2)
$(LX) run -m experiment=sb_table3 profile=$(1) $(2)
$(LX) run -m experiment=sb_table4 profile=$(1) $(2)
$(LX) run -m experiment=sb_table5 profile=$(1) $(2)
endef

# The reproductions write the committed results (results/mini, results/paper); everything else writes results/local.
reproduce-mini-a reproduce-mini-b reproduce-mini reproduce-all tables: export LENGTHX_RESULTS := results

reproduce-mini-a: install
	$(AA_MINI_RECIPE)

reproduce-mini-b: install
	$(call SB_RECIPE,mini,$(SB_DRY_RUN))
	$(LX) run -m experiment=ext_tau_vs_segmented $(SB_DRY_RUN)   # beyond both papers: τ rules vs segmented training

# then every table (plain and beside the paper), the figures, and the result blocks of the Markdown files that
# include them (MARKDOWN_BLOCKS: every file with a `<!-- lengthx:include … -->` block; tests/test_readme_blocks.py
# keeps the list complete)
MARKDOWN_BLOCKS := README.md docs/protocol.md docs/results-paper-a.md docs/results-paper-b.md docs/mini-t5-lm.md docs/mini-t5-lines.md
reproduce-mini: reproduce-mini-a reproduce-mini-b
	$(LX) tables
	$(LX) tables --compare-paper
	$(LX) figures
	$(BIN)/python -m lengthx.report.tables.readme $(MARKDOWN_BLOCKS)

# The paper profile: needs hub access (or a local cache) and a GPU. Resumable: rerun to continue.
# One experiment per table (lengthx/conf/experiment/aa_*.yaml, sb_*.yaml), the paper's models × methods × settings;
# AA_PAPER_ARGS passes data paths, e.g. task.data_dir=… (MDQA upstream files) or task.text_path=… (LM).
# It first prints the plan and its estimate (`lengthx plan … --estimate`: cells, examples, tokens, forward passes,
# GPU-hours from the committed GPU benchmark, results/bench/gpu-h200.md; what it never measured is named as unmeasured).
# `make reproduce-all AA_DRY_RUN=--dry-run` then lists every job's cells, loading no model.
AA_PAPER_ARGS ?=
PAPER_EXPERIMENTS := aa_table1,aa_table3,aa_table4,aa_table5,aa_table6,aa_code_key,sb_table2,sb_table3,sb_table4,sb_table5
reproduce-all: install
	$(LX) plan profile=paper experiment=$(PAPER_EXPERIMENTS) $(AA_PAPER_ARGS) --estimate
	$(LX) stats -m experiment=aa_table1 profile=paper $(AA_PAPER_ARGS) $(AA_DRY_RUN)
	$(LX) run -m experiment=aa_table3 profile=paper $(AA_PAPER_ARGS) $(AA_DRY_RUN)
	$(LX) run -m experiment=aa_table4 profile=paper $(AA_PAPER_ARGS) $(AA_DRY_RUN)
	$(LX) run -m experiment=aa_table5 profile=paper $(AA_PAPER_ARGS) $(AA_DRY_RUN)
	$(LX) run -m experiment=aa_table6 profile=paper $(AA_PAPER_ARGS) $(AA_DRY_RUN)
	$(LX) run -m experiment=aa_code_key profile=paper $(AA_PAPER_ARGS) $(AA_DRY_RUN)
	$(call SB_RECIPE,paper,$(AA_DRY_RUN))
	$(if $(AA_DRY_RUN),,$(LX) tables --results-dir results/paper)

# mini-t5-lm and the regime study (docs/mini-t5-lm.md). `mini-t5-lm` trains the shipped stand-in (resumable;
# fp16 snapshots at steps 500/1000/2000 stay in runs/mini-t5-lm); the study trains two variants (8 heads of 16
# dims; 2 encoder layers) and measures every variant on the same text at 1-29x L_tr with the harness
# (results/mini-t5-lm-study/<variant>/, summary in study.md). It needs `make mini-t5-lm` first (the snapshots).
STUDY_EXAMPLES ?= 60
mini-t5-lm: install
	$(LX) train-mini recipe=t5_lm export=lengthx/checkpoints/mini-t5-lm

# The retrieval stand-in study (docs/mini-t5-study.md): one CPU-trained T5 per seed in STUDY_SEEDS (passkey +
# topics, 2600 steps on one thread, fp16 snapshots at fixed steps committed to results/mini-t5-study/snapshots),
# then every snapshot x task x length x method with the harness. Both steps resume (rerun to continue); a seed
# whose last snapshot is committed is not trained again.
STUDY_SEEDS ?= 0 1
# One command for both studies' seeds: $(1) the study's directory, $(2) its recipe (lengthx/conf/mini/), $(3) its
# last snapshot's step, $(4) the seeds. A seed whose last snapshot is committed is not trained again.
train_seeds = for s in $(4); do test -f $(1)/snapshots/seed$$s/step-$(3)/README.md && continue; \
		OMP_NUM_THREADS=1 $(LX) train-mini recipe=$(2) seed=$$s \
		out=$(1)/train/seed$$s snapshots_to=$(1)/snapshots/seed$$s || exit 1; done
study_train = $(call train_seeds,results/mini-t5-study,retrieval_study,02600,$(1))
mini-t5-study: install
	$(call study_train,$(STUDY_SEEDS))
	OMP_NUM_THREADS=1 $(BIN)/python scripts/studies/study_mini_t5.py

# The first-of-K stand-in study (docs/mini-t5-study.md, second study): one CPU-trained T5 per seed in COUNTS_SEEDS on
# passkey and topics records of 1-6 conversations in the short format (3200 steps on one thread, fp16 snapshots at
# fixed steps committed to results/mini-t5-counts/snapshots), then every snapshot x variant x length x method with the
# harness, the picked snapshot first. Both steps resume; a seed whose last snapshot is committed is not trained again.
COUNTS_SEEDS ?= 0 1
counts_train = $(call train_seeds,results/mini-t5-counts,first_of_k,03200,$(1))
mini-t5-counts-study: install
	$(call counts_train,$(COUNTS_SEEDS))
	OMP_NUM_THREADS=1 $(BIN)/python scripts/studies/study_mini_t5_counts.py

# The shipped Flan-T5 stand-in, lengthx/checkpoints/mini-t5: both seeds of the first-of-K study (trained if their
# snapshots are not committed), then the snapshot its selection rule picks, copied with its card
# (docs/mini-t5-study.md). The first study's stand-in stays in results/mini-t5-study/snapshots.
mini-t5: install
	$(call counts_train,0 1)
	$(BIN)/python scripts/studies/study_mini_t5_counts.py --ship lengthx/checkpoints/mini-t5

# The lookup stand-in study (docs/mini-t5-lookup.md): variants W (from the shipped mini-t5), P (the
# same, one-piece keys and values first), S (from random weights) and the extensions P+ (`pieces_more`, from P's
# last snapshot, fixed after P's budget ended), S+ (`scratch_more`, from S's, fixed before S's decay) and F (`fill`, from
# S+'s step 8,000, half its records padded with filler) on lines records in the short format (half
# multi-query, the key echoed) beside passkey and first-of-K topics, 20,000 steps each on one thread, fp16 snapshots every 2,000 steps committed to
# results/mini-t5-lookup/snapshots/<variant>. Resumable; a variant whose last snapshot is committed, or whose
# training stopped at the gate, is not trained again. Each variant is its own recipe (lengthx/conf/mini/lookup_<variant>.yaml).
LOOKUP_VARIANTS ?= warm pieces scratch pieces_more scratch_more fill
mini-t5-lookup-study: install
	for v in $(LOOKUP_VARIANTS); do test -f results/mini-t5-lookup/snapshots/$$v/step-20000/README.md && continue; \
		OMP_NUM_THREADS=1 nice $(LX) train-mini recipe=lookup_$$v || exit 1; done

# The lookup study's report (docs/mini-t5-lookup.md): every variant's curve (results/mini-t5-lookup/curves.{png,md})
# and what each committed snapshot gets wrong (results/mini-t5-lookup/errors.md, 100 held-out records per count and
# record form; each snapshot's answers kept in results/mini-t5-lookup/answers/, so only a new snapshot is generated)
# and where they attend on records of two lines (results/mini-t5-lookup/attention.md, each snapshot's shares kept in
# results/mini-t5-lookup/shares/); P's turn at the end of its budget, W's end and every snapshot of P+ on 1,000
# one-piece two-line records (results/mini-t5-lookup/late-rise.md); W's end and every snapshot of S and S+ on 1,000
# two-line records of the benchmark's form (results/mini-t5-lookup/late-rise-benchmark.md); W's end, S's last three
# snapshots and every one of S+ on records of exactly 2, 6 and 10 lines padded with filler to L_tr, the lines study's
# records (results/mini-t5-lookup/filled.md, stores in results/mini-t5-lookup/filled/).
LOOKUP_SNAPS := results/mini-t5-lookup/snapshots
# $(call late_rise,SNAPSHOTS,FORM,OUT): 1,000 held-out two-line records of FORM per snapshot, answers kept
late_rise = OMP_NUM_THREADS=1 $(BIN)/python scripts/studies/lookup_errors.py $(1) --counts 2 --n 1000 --forms $(2) \
	--out results/mini-t5-lookup/$(3) --cache results/mini-t5-lookup/answers
mini-t5-lookup-report: install
	$(BIN)/python scripts/studies/plot_lookup_curves.py
	OMP_NUM_THREADS=1 $(BIN)/python scripts/studies/lookup_errors.py results/mini-t5-lookup/snapshots/*/step-* \
		--counts 1 2 6 12 --n 100 --forms benchmark one-piece --out results/mini-t5-lookup/errors.md \
		--cache results/mini-t5-lookup/answers
	$(call late_rise,$(foreach s,pieces/step-16000 pieces/step-18000 pieces/step-20000 warm/step-20000,$(LOOKUP_SNAPS)/$(s)) \
		$(sort $(wildcard $(LOOKUP_SNAPS)/pieces_more/step-*)),one-piece,late-rise.md)
	$(call late_rise,$(LOOKUP_SNAPS)/warm/step-20000 $(sort $(wildcard $(LOOKUP_SNAPS)/scratch*/step-* $(LOOKUP_SNAPS)/fill/step-*)),benchmark,late-rise-benchmark.md)
	OMP_NUM_THREADS=1 $(BIN)/python scripts/studies/lookup_attention.py results/mini-t5-lookup/snapshots/*/step-* \
		--n 100 --forms one-piece benchmark --out results/mini-t5-lookup/attention.md --cache results/mini-t5-lookup/shares
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python scripts/studies/lookup_filled.py $(LOOKUP_SNAPS)/warm/step-20000 \
		$(foreach s,16000 18000 20000,$(LOOKUP_SNAPS)/scratch/step-$(s)) $(sort $(wildcard $(LOOKUP_SNAPS)/scratch_more/step-* $(LOOKUP_SNAPS)/fill/step-*)) \
		--counts 2 6 10 11 12 --n 50 --out results/mini-t5-lookup/filled.md

# The lookup stand-in's lines study (docs/mini-t5-lookup.md, "The lines study, fixed"): the snapshot the selection
# rule picks (`study_mini_t5_lines.py --pick` says which, or which variant it waits for), measured with the harness
# at L_tr, ~4x, ~10x and 29x (resumable), then results/mini-t5-lines/study.md and headline.md; replications owed:
# `study_mini_t5_lines.py --owed`, then `--replicate SPEC…`.
mini-t5-lines-study: install
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python scripts/studies/study_mini_t5_lines.py

mini-t5-lm-study: install
	$(LX) train-mini recipe=t5_lm out=runs/mini-t5-lm-h8 heads=8 steps=2000 snapshots=1000 export=runs/mini-t5-lm-h8/export
	$(LX) train-mini recipe=t5_lm out=runs/mini-t5-lm-enc2 enc_layers=2 steps=1500 snapshots= export=runs/mini-t5-lm-enc2/export
	$(BIN)/python scripts/studies/study_mini_t5_lm.py --examples $(STUDY_EXAMPLES) --ratios 1 2 8 29.296875 \
		--variant final=lengthx/checkpoints/mini-t5-lm --variant final-bf16=lengthx/checkpoints/mini-t5-lm:bfloat16 \
		--variant step-500=runs/mini-t5-lm/step-500 --variant step-1000=runs/mini-t5-lm/step-1000 \
		--variant step-2000=runs/mini-t5-lm/step-2000 --variant heads-8=runs/mini-t5-lm-h8/export \
		--variant enc-2=runs/mini-t5-lm-enc2/export

lint: install
	$(BIN)/ruff check lengthx tests scripts

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache
