# Parse-time helpers only: config validation, input functions, parameter dicts.
import json
import os
import re
import sys
from pathlib import Path

# workflow.basedir is the folder of workflow/Snakefile; the checkout is the folder above it.
ROOT = Path(workflow.basedir).parent
sys.path.insert(0, str(ROOT / "workflow"))
# Rule scripts run in their own processes: they must import this workflow's package (the one whose files the
# rules list as code inputs), not whichever copy happens to be installed.
# (Set, not required from the user: so no envvars directive.)
os.environ.update(
    PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT / "workflow"), os.getenv("PYTHONPATH", "")) if p
    )
)

from lorabench.adapter_paths import adapter_key, source_files  # noqa: E402
from lorabench.code_inputs import import_closure  # noqa: E402
from lorabench.config import (  # noqa: E402
    ConfigError,
    detect_hardware,
    load_and_check,
    prefix_cache_servers,
    rate_sweep_mixes,
    runtime_load_servers,
    stable_hash,
)
from lorabench.preflight import check_before_jobs  # noqa: E402
from lorabench.groups import (  # noqa: E402
    group_of,
    groups_of,
    grouped_servers,
    memory_shares,
    solo_servers,
)
from lorabench.job import engine_runnable, input_paths, server_job  # noqa: E402
from lorabench.loadgen.traffic import (  # noqa: E402
    context_limits,
    dataset_files,
    needs_tokenizer,
)

try:
    load_and_check(config)
    check_before_jobs(config)
except ConfigError as e:
    raise WorkflowError(str(e)) from None

PKG = ROOT / "workflow" / "lorabench"
SCRIPTS = ROOT / "workflow" / "scripts"
TEMPLATES = ROOT / "report" / "templates"
HARDWARE = detect_hardware()
STUDY = config["study"]


def _rel(p):
    """A path relative to the working directory when it lies below it, so that moving or copying a study
    folder does not change the rules' input sets (and rerun everything)."""
    try:
        return (
            os.path.relpath(p)
            if Path(p).resolve().is_relative_to(Path.cwd().resolve())
            else str(p)
        )
    except ValueError:
        return str(p)


def code_of(script):
    """The package modules the rule script ``workflow/scripts/SCRIPT`` imports, transitively (its import closure,
    read by lorabench.code_inputs), as the rule's ``code`` inputs: editing one reruns exactly the rules whose
    scripts run it, and no list kept by hand drifts from the imports."""
    return [_rel(f) for f in import_closure(SCRIPTS / script, PKG)]


def env_params(wildcards):
    """Everything the engine environment depends on, as one sorted JSON string."""
    eng = config["engines"][wildcards.engine]
    req = eng.get("requirements")
    return json.dumps(
        {
            "engine": wildcards.engine,
            "kind": eng["kind"],
            "version": eng["version"],
            "requirements": req,
            "requirements_sha": stable_hash(Path(req).read_text()) if req else None,
            "python_version": eng.get("python_version", "3.11"),
            "remove": eng.get("remove", []),
            "existing": eng.get("existing"),
            "env": eng.get("env", {}),
            "runnable": engine_runnable(config, wildcards.engine, HARDWARE),
            "env_root": config["env_root"],
        },
        sort_keys=True,
    )


def env_inputs(wildcards):
    req = config["engines"][wildcards.engine].get("requirements")
    return [req] if req else []


def adapter_params(wildcards):
    return json.dumps(config["adapters"][wildcards.adapter], sort_keys=True)


def adapter_names_re(synthetic):
    """The adapters built with PEFT (``synthetic``) or given by path, as a wildcard constraint for their rule."""
    names = [
        n for n, a in config["adapters"].items() if bool(a.get("path")) != synthetic
    ]
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


def adapter_source_files(wildcards):
    return [_rel(f) for f in source_files(config, wildcards.adapter)]


def adapter_import_params(wildcards):
    return json.dumps(
        {
            "path": config["adapters"][wildcards.adapter]["path"],
            "key": adapter_key(config, wildcards.adapter),
        },
        sort_keys=True,
    )


def server_job_params(server, runtime=False, prefix=False):
    """The server job (lorabench.job.ServerJob) as the rule's params: sorted JSON of everything that changes
    its measurement."""
    return server_job(
        config, server, HARDWARE, runtime=runtime, prefix=prefix
    ).to_json()


def kind_params(kind, server):
    """The settings of a job kind other than the load test (lorabench.jobs.JobKind.to_json) as the rule's params;
    each kind's module is imported only when its rule is planned."""
    if kind == "runtime_load":
        from lorabench.job import runtime_load_params
        from lorabench.runtime_load import RuntimeLoading

        return RuntimeLoading(runtime_load_params(config)).to_json()
    if kind == "prefix_cache":
        from lorabench.job import prefix_cache_params
        from lorabench.prefix_cache import PrefixCaching

        return PrefixCaching(prefix_cache_params(config)).to_json()
    from lorabench.rate_sweep import RateSweep

    return RateSweep.of_config(config, server).to_json()


def sweep_servers():
    """The servers of rate_sweep.servers (none without a rate_sweep section)."""
    return sorted(rate_sweep_mixes(config))


def server_inputs(wildcards):
    return input_paths(config, wildcards.server)


def names_re(names):
    """Exactly these names, as a wildcard constraint (none: a pattern that matches nothing)."""
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


def group_job_params(group):
    """The group's job (lorabench.group.GroupJob: each member's server job, in start order) as the rule's params."""
    from lorabench.group import GroupJob

    members = groups_of(config)[group]
    jobs = [server_job(config, s, HARDWARE) for s in members]
    return GroupJob(group, jobs, memory_shares(config, group)).to_json()


def group_files_params(group):
    """Each member's input files by name (job.input_paths), as sorted JSON."""
    return json.dumps(
        {s: input_paths(config, s) for s in groups_of(config)[group]}, sort_keys=True
    )


def group_inputs(wildcards):
    """Every member's input files (engine environments, model, request set, adapters), once each."""
    paths = [input_paths(config, s) for s in groups_of(config)[wildcards.group]]
    return {
        "env": sorted({p["env"] for p in paths}),
        "model": paths[0]["model"],
        "requests": paths[0]["requests"],
        "adapters": sorted({a for p in paths for a in p["adapters"]}),
    }


def member_group_outputs(wildcards):
    """The group job's outputs a grouped server's files come from."""
    g = group_of(config, wildcards.server)
    return {
        "group": f"results/groups/{g}/group.json",
        "servers": f"results/groups/{g}/servers",
    }


def runtime_servers():
    return runtime_load_servers(config)


def prefix_servers():
    return prefix_cache_servers(config)


def summary_inputs():
    return {
        "measurements": expand(
            "results/servers/{server}/measurements.jsonl",
            server=sorted(config["servers"]),
        ),
        "facts": expand(
            "results/servers/{server}/facts.json", server=sorted(config["servers"])
        ),
        "runtime": expand(
            "results/runtime_load/{server}/load.json", server=runtime_servers()
        ),
        "prefix": expand(
            "results/prefix_cache/{server}/prefix.json", server=prefix_servers()
        ),
        "envs": expand("results/envs/{engine}.json", engine=sorted(config["engines"])),
    }


def loaded_configfiles():
    """The config files this run really used: the workflow's own unless --replace-workflow-config discarded it,
    then those given with --configfile (a bundle archives these, and the merged config beside them).
    """
    cli = [str(f) for f in workflow.config_settings.configfiles]
    if cli and workflow.config_settings.replace_workflow_config:
        return cli
    return ["config/config.yaml", *[f for f in cli if f != "config/config.yaml"]]


def all_targets():
    sweeps = ["results/capacity/capacity.json"] if sweep_servers() else []
    return ["results/report/index.html", f"results/bundle/{STUDY}.tar.gz", *sweeps]
