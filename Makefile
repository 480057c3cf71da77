# lengthx — set-up, tests, the demo and the reproductions. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
LX     := $(BIN)/lengthx
export HF_HUB_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test demo bench tables reproduce-mini reproduce-all lint clean

install: $(VENV)/.installed

# torch is pinned first (the CPU wheel); pyproject says torch>=2.6 so GPU users keep their own build.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# pytest exits 5 when it collects no test; that is not a failure of the suite.
test: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest tests; rc=$$?; if [ $$rc -eq 5 ]; then exit 0; else exit $$rc; fi

# The main job on a demo-sized slice (the 20k and 30k columns, 4 examples each, 1 calibration example);
# `make demo DEMO_ARGS=` runs the full mini profile. Cells resume, so a later full run reuses these examples.
DEMO_ARGS ?= task.num_examples=4 calibration.num_examples=1 'task.only=[20k,30k]'
demo: install
	$(LX) run task=passkey method=none $(DEMO_ARGS)
	$(LX) run task=passkey method=pmax $(DEMO_ARGS)
	$(LX) tables --format markdown

bench: install
	$(BIN)/python scripts/bench_attention.py
	$(BIN)/python scripts/bench_alignment.py
	$(BIN)/python scripts/bench_training_memory.py

tables: install
	$(LX) tables

# Paper A, passkey columns of Table 4, every temperature method implemented so far, on the mini profile.
# The other tasks and paper B join this target with their issues; until then it says so.
reproduce-mini: install
	$(LX) run -m experiment=aa_table4
	$(LX) tables
	@echo "reproduce-mini: ran paper A Table 4 (passkey). Topics/lines/mdqa/code/LM tasks and paper B are not implemented yet."

# The paper profile: needs hub access (or a local cache) and a GPU. Resumable: rerun to continue.
reproduce-all: install
	$(LX) run -m experiment=aa_table4 profile=paper model=flan-t5-large,flan-t5-xl,flan-t5-xxl
	$(LX) tables --results-dir results/paper
	@echo "reproduce-all: ran paper A Table 4 (passkey). The other tables join this target with their issues."

lint: install
	$(BIN)/ruff check lengthx tests scripts

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache
