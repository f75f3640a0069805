# lorabench: what multi-LoRA serving costs on real inference engines.
#
# results/ layout (one folder per stage, one separator "/" in paths):
#   results/model/weights/              base model (synthetic or a link to real weights) + manifest.json beside it
#   results/adapters/{adapter}/         PEFT adapter files; results/adapters/{adapter}.json its manifest
#   results/envs/{engine}.json          engine environment: python, version, pip freeze (results/envs/{engine}.freeze.txt)
#   results/workload/requests.json      the request set, generated once with its seed
#   results/servers/{server}/           per server job: records.jsonl (per request), measurements.jsonl,
#                                       metrics.jsonl, facts.json, server.log
#   results/runtime_load/{server}/      runtime adapter loading: load.json, records.jsonl, server.log
#   results/queues/queues.json          batch size and queues per server, condition and burst (engine metrics)
#   results/summary/                    tidy CSV tables (measurements, summary, server facts) + summary.json
#   results/claims/verdicts.json        every claim with its computed verdict
#   results/report/index.html           the report (plots beside it)
#   results/bundle/{study}.tar.gz       archive with checksums and provenance
# logs/ mirrors the rules; every rule has a log.

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"


# Light jobs never go to a cluster's queue (profiles/slurm submits the rest).
localrules:
    all,
    workload_requests,
    summary_aggregate,
    queues_summary,
    claims_evaluate,
    report_render,
    bundle_archive,


# A run killed hard leaves its SLURM jobs running: a run with the SLURM executor first cancels those an
# earlier run of this study left queued or running (workflow/lorabench/slurm.py says which jobs count).
onstart:
    if (
        workflow.is_main_process
        and getattr(workflow.executor_plugin, "name", None) == "slurm"
    ):
        from lorabench.slurm import SlurmError, cancel_leftovers

        names = {r.name for r in workflow.rules} | {
            r.group for r in workflow.rules if r.group
        }
        try:
            cancel_leftovers(workflow.workdir_init, names, log=logger.info)
        except SlurmError as e:
            raise WorkflowError(f"cancelling leftover SLURM jobs: {e}") from None


include: "workflow/rules/artifacts.smk"
include: "workflow/rules/engines.smk"
include: "workflow/rules/measure.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        all_targets(),
