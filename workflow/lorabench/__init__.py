"""lorabench: reproducible measurements of multi-LoRA serving on real inference engines.

The package holds the logic; the Snakemake rules in ``workflow/rules`` only wire files and parameters to it.
Subpackages: ``engines`` (one module per engine, registered by name), ``loadgen`` (request sets and the
streaming client), ``measure`` (the measuring core: bursts, cycles, probes, sweeps). Modules: ``model`` and
``adapters`` (artifacts), ``envs`` (engine environments), ``server`` (process lifecycle), ``session`` (one job's
server session), ``jobs`` (job kinds and their runner; kinds ``loadtest``, ``runtime_load``, ``prefix_cache``),
``stats``/``summary`` (aggregation),
``claims``, ``report``, ``bundle``.
"""

__version__ = "0.1.0"
