"""lengthx's submitit launchers (``hydra/launcher=slurm``, ``submitit_slurm``, ``submitit_local``): the plugin's own,
with the job ids at submission, Ctrl-C that cancels the jobs, and failed jobs named by their cells
(:mod:`lengthx.cli.submitit_jobs`, docs/cluster.md). Hydra instantiates launchers only from this namespace; it
imports this module while it scans for plugins, so it stays light and empty where submitit is not installed.
"""

try:
    from hydra_plugins.hydra_submitit_launcher import submitit_launcher as _upstream
except ImportError:  # the slurm extra is not installed: no launcher to extend
    _upstream = None

if _upstream is not None:
    from lengthx.cli.submitit_jobs import Watched

    class SlurmLauncher(Watched, _upstream.SlurmLauncher):
        """``hydra/launcher=slurm``: one SLURM array task per job of the sweep."""

    class LocalLauncher(Watched, _upstream.LocalLauncher):
        """``hydra/launcher=submitit_local``: each job its own process on this machine, as on a cluster."""
