"""Rule claims_evaluate: every registered claim against the measurements; verdicts are computed, never written."""

from lorabench.claims import evaluate_file
from lorabench.io import setup_job_logging

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
evaluate_file(
    sm.input.claims,
    sm.input.summary,
    sm.input.model,
    list(sm.input.adapters),
    sm.output.verdicts,
    sm.input.reference_arch,
    sm.input.queues,
    sm.params.analogue_model,
)
