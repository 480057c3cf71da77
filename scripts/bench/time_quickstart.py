"""Run the Quickstart block (docs/usage.md) as a new user would and time each command: the times in its comments.

The ``lengthx …`` lines of the block under "## Quickstart" run in order, each a fresh process
(``python -m lengthx.cli``), in an empty scratch directory with a copy of the committed ``results/mini`` (which
one line reads), a fresh data cache (``LENGTHX_CACHE``) and one CPU thread. The table gives each command's wall
time, exit status and last line of output (stdout's, else stderr's), and the machine's CPU count and load average at the start.

    python scripts/bench/time_quickstart.py      # -> results/bench/quickstart.md
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs" / "usage.md"


def quickstart_commands(markdown: Path = QUICKSTART, heading: str = "Quickstart") -> list[str]:
    """The ``lengthx`` command lines of the first bash block under ``## <heading>…`` in ``markdown`` (the Quickstart
    of docs/usage.md; the README's "First steps" is a few of them), without their comments."""
    section = markdown.read_text(encoding="utf-8").split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("\n```", 1)[0]
    lines = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "lengthx":
            lines.append(shlex.join(words))
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "results" / "bench" / "quickstart.md"))
    args = p.parse_args()
    commands = quickstart_commands()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LENGTHX_")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    rows = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="lengthx-quickstart-") as tmp:
        work = Path(tmp) / "work"
        shutil.copytree(ROOT / "results" / "mini", work / "results" / "mini")
        env["LENGTHX_CACHE"] = str(Path(tmp) / "cache")
        for command in commands:
            argv = [sys.executable, "-m", "lengthx.cli", *shlex.split(command)[1:]]
            start = time.perf_counter()
            proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            # what the command printed last (its summary on stdout; progress bars and logs go to stderr)
            tail = [ln.strip() for ln in (proc.stdout or proc.stderr).splitlines() if ln.strip()]
            last = (tail[-1] if tail else "").replace("|", "\\|")[:100]
            rows.append((command, seconds, proc.returncode, last))
            print(f"{seconds:7.1f} s  rc={proc.returncode}  {command}", flush=True)
    lines = [
        "# Quickstart timings",
        "",
        "`python scripts/bench/time_quickstart.py`: the Quickstart commands of docs/usage.md in order, each a fresh process in a "
        f"scratch directory (a copy of results/mini, a fresh data cache), one thread, on a machine of {os.cpu_count()} "
        f"CPUs shared with other work (load average {load:.1f} at the start). Wall times: a busy machine runs slower.",
        "",
        "| command | seconds | exit | last line of output |",
        "|---|---|---|---|",
        *(f"| `{c}` | {s:.0f} | {rc} | {last} |" for c, s, rc, last in rows),
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
