"""Hydra's submitit launchers (``hydra/launcher=slurm``, ``submitit_slurm``, ``submitit_local``) with what the
person at the terminal needs (docs/cluster.md, "What you see"):

- at submission, one line with the job ids, the folder of their logs, the results place and how to follow or
  stop the sweep;
- Ctrl-C (or SIGTERM) on the waiting command cancels its jobs (``scancel`` on SLURM) before it says how to
  resume, so no job is left running with nobody waiting for it;
- a job that ends without finishing (killed, failed, timed out too many times) is reported once every other
  job has ended, naming its cells, its log and the rerun that resumes it, never as a bare ``UncompletedJobError``.

The jobs themselves run exactly as the upstream launchers run them: ``launch`` is the plugin's own; only the
executor's ``map_array`` is watched while it runs, to learn the jobs it submits. Hydra instantiates launchers only
from the ``hydra_plugins`` namespace, so the classes live in ``hydra_plugins/lengthx_launchers`` (shipped with
lengthx); this module is what they add.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lengthx.errors import JobsFailed, one_line


def _ids(jobs: Sequence[Any]) -> str:
    ids = [str(job.job_id) for job in jobs]
    return ids[0] if len(ids) == 1 else f"{ids[0]} … {ids[-1]}"


def _stop_hint(executor: str, jobs: Sequence[Any]) -> str:
    if executor == "slurm":
        arrays = sorted({str(job.job_id).split("_")[0] for job in jobs})
        return f"Ctrl-C here cancels them (or scancel {' '.join(arrays)})"
    return "Ctrl-C here cancels them"


class Watched:
    """What ``hydra_plugins.lengthx_launchers``' SlurmLauncher and LocalLauncher add to the plugin's launchers."""

    _EXECUTOR: str
    config: Any
    hydra_context: Any

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        import submitit
        from submitit.core.utils import UncompletedJobError

        jobs: list[Any] = []
        submit = submitit.AutoExecutor.map_array

        def map_array(executor: Any, fn: Any, *iterables: Any) -> list[Any]:
            jobs.extend(submit(executor, fn, *iterables))
            self._announce(jobs, executor)
            return jobs

        submitit.AutoExecutor.map_array = map_array
        try:
            returns = super().launch(job_overrides, initial_job_idx)  # type: ignore[misc]
        except KeyboardInterrupt:
            self._cancel(jobs)
            raise
        except UncompletedJobError as caught:
            try:
                for job in jobs:  # the other jobs finish what they can before the report
                    job.wait()
            except KeyboardInterrupt:
                self._cancel(jobs)
                raise
            failed = []  # the caught error is its job's (submitit waits 15 s for a result before it says so)
            for i, job in enumerate(jobs):
                err = caught if str(caught).startswith(f"Job {job.job_id} ") else job.exception()
                if err is not None:
                    failed.append((i, job, err))
            if not failed:  # no job says what failed: submitit's own error, as it is
                raise
            raise JobsFailed(self._failures(failed, job_overrides)) from None
        finally:
            submitit.AutoExecutor.map_array = submit
        raised = []  # jobs whose task raised (Hydra keeps the error in the job's return: a failed cell, a time-out)
        for i, returned in enumerate(returns):
            try:
                returned.return_value  # noqa: B018 - raises the job's error
            except Exception as err:  # noqa: BLE001 - reported below, with the job's cells
                raised.append((i, jobs[i], err))
        if raised:
            raise JobsFailed(self._failures(raised, job_overrides))
        return returns

    def _announce(self, jobs: Sequence[Any], executor: Any) -> None:
        from omegaconf import OmegaConf

        where = str(Path(str(executor.folder)).resolve()).replace("%j", "<job id>")
        results = OmegaConf.select(self.config, "results_dir")  # lengthx run / stats / calibrate
        output = (f"results: {results} (follow with: lengthx tables --summary --results-dir {results})"
                  if results is not None else
                  f"runs: {OmegaConf.select(self.config, 'train.output_dir') or 'the runs place (LENGTHX_RUNS, runs/)'}")
        print(f"submitted {len(jobs)} job(s) to {self._EXECUTOR}: {_ids(jobs)}; their logs: {where}; {output}; "
              f"{_stop_hint(self._EXECUTOR, jobs)}", flush=True)

    def _cancel(self, jobs: Sequence[Any]) -> None:
        running = [job for job in jobs if not job.done()]
        for job in running:
            job.cancel(check=False)
        if running:
            print(f"cancelled {len(running)} job(s) of the sweep ({_ids(running)}); what they finished is kept",
                  flush=True)

    def _failures(self, failed: list[tuple[int, Any, Exception]], job_overrides: Sequence[Sequence[str]]) -> str:
        index, job, err = failed[0]
        if isinstance(err, JobsFailed):  # the job said what failed: a user error, a failure, its failed cells
            return f"{len(failed)} of {len(job_overrides)} job(s) of the sweep failed; the first, job " \
                   f"{job.job_id}: {one_line(str(err))}"
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        raised = [line for line in lines if re.match(r"[\w.]+(Error|Exception|Failed|Interrupt)\b:", line)]
        reason = raised[-1] if raised else lines[0] if lines else type(err).__name__  # the job's own error, or why
        return (f"{len(failed)} of {len(job_overrides)} job(s) of the sweep did not finish; the first, "
                f"job {job.job_id} ({self._cells(job_overrides[index])}): {one_line(reason)[:300]} (its log: "
                f"{job.paths.stderr}). Fix the cause if there is one and rerun the same command: finished cells and "
                "examples are kept, the rest resume")

    def _cells(self, overrides: Sequence[str]) -> str:
        """The cells of the job run with ``overrides`` (its overrides where they cannot be composed here)."""
        try:
            from lengthx.cli.common import job_cells
            from lengthx.models.minis import apply_profile

            cfg = apply_profile(self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides)))
            keys = [cell.key for cell in job_cells(cfg)]
            return "cells " + ", ".join(keys) if keys else " ".join(overrides)
        except Exception:  # noqa: BLE001 - the report names the job's overrides instead
            return " ".join(overrides)

