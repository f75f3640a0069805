# Summarise -> claims -> render -> bundle. None of these needs a server: the report rebuilds from saved results.


rule summary_aggregate:
    input:
        **summary_inputs(),
        # with runtime_load: its figures are recomputed from each load.json's cycles
        code=code_of("summary_aggregate.py"),
    output:
        measurements="results/summary/measurements.csv",
        summary="results/summary/summary.csv",
        facts="results/summary/server_facts.csv",
        json="results/summary/summary.json",
    log:
        "logs/summary_aggregate.log",
    params:
        baseline=json.dumps(config.get("baseline"), sort_keys=True),
        conditions=json.dumps(config["conditions"], sort_keys=True),
    script:
        "../scripts/summary_aggregate.py"


rule queues_summary:
    input:
        metrics=expand(
            "results/servers/{server}/metrics.jsonl", server=sorted(config["servers"])
        ),
        facts=expand(
            "results/servers/{server}/facts.json", server=sorted(config["servers"])
        ),
        records=expand(
            "results/servers/{server}/records.jsonl", server=sorted(config["servers"])
        ),
        code=code_of("queues_summary.py"),
    output:
        queues="results/queues/queues.json",
    log:
        "logs/queues_summary.log",
    params:
        conditions=json.dumps(config["conditions"], sort_keys=True),
    script:
        "../scripts/queues_summary.py"


rule claims_evaluate:
    input:
        claims=config["claims"],
        summary=rules.summary_aggregate.output.json,
        queues=rules.queues_summary.output.queues,
        model=rules.model_build.output.manifest,
        adapters=expand(
            "results/adapters/{adapter}.json", adapter=sorted(config["adapters"])
        ),
        # the source's architecture, for claims about its adapter sizes
        reference_arch=config["reference_architecture"],
        code=code_of("claims_evaluate.py"),
    output:
        verdicts="results/claims/verdicts.json",
    log:
        "logs/claims_evaluate.log",
    params:
        analogue_model=config["analogue_model"],
    script:
        "../scripts/claims_evaluate.py"


rule report_render:
    input:
        summary=rules.summary_aggregate.output.json,
        queues=rules.queues_summary.output.queues,
        verdicts=rules.claims_evaluate.output.verdicts,
        model=rules.model_build.output.manifest,
        adapters=expand(
            "results/adapters/{adapter}.json", adapter=sorted(config["adapters"])
        ),
        envs=expand("results/envs/{engine}.json", engine=sorted(config["engines"])),
        templates=sorted(_rel(p) for p in TEMPLATES.rglob("*.j2")),
        # GPU figures for the roofline bound
        hardware=config["hardware_specs"],
        # capacity at the SLO, with a rate_sweep section
        capacity=(
            ["results/capacity/capacity.json", "results/capacity/plots"]
            if sweep_servers()
            else []
        ),
        code=code_of("report_render.py"),
    output:
        html="results/report/index.html",
        provenance="results/report/provenance.json",
    log:
        "logs/report_render.log",
    params:
        study=STUDY,
        config=json.dumps(config, sort_keys=True),
        checkout=_rel(ROOT),
    script:
        "../scripts/report_render.py"


rule bundle_archive:
    input:
        config=loaded_configfiles(),
        claims=config["claims"],
        report=rules.report_render.output.html,
        provenance=rules.report_render.output.provenance,
        verdicts=rules.claims_evaluate.output.verdicts,
        summary=rules.summary_aggregate.output.json,
        summary_csv=rules.summary_aggregate.output.summary,
        queues=rules.queues_summary.output.queues,
        servers=expand(
            "results/servers/{server}/{f}",
            server=sorted(config["servers"]),
            f=[
                "measurements.jsonl",
                "records.jsonl",
                "metrics.jsonl",
                "facts.json",
                "server.log",
            ],
        ),
        runtime=expand(
            "results/runtime_load/{server}/{f}",
            server=runtime_servers(),
            f=["load.json", "records.jsonl", "server.log"],
        ),
        prefix=expand(
            "results/prefix_cache/{server}/{f}",
            server=prefix_servers(),
            f=["prefix.json", "records.jsonl", "server.log"],
        ),
        sweeps=expand(
            "results/rate_sweep/{server}/{f}",
            server=sweep_servers(),
            f=["sweep.json", "records.jsonl", "facts.json", "server.log"],
        ),
        capacity=["results/capacity/capacity.json"] if sweep_servers() else [],
        # co-resident groups: their members and each cycle's order (the members' files are under servers)
        groups=expand(
            "results/groups/{group}/group.json", group=sorted(groups_of(config))
        ),
        envs=expand(
            "results/envs/{engine}.{ext}",
            engine=sorted(config["engines"]),
            ext=["json", "freeze.txt"],
        ),
        adapters=expand(
            "results/adapters/{adapter}.json", adapter=sorted(config["adapters"])
        ),
        model=rules.model_build.output.manifest,
        requests=rules.workload_requests.output.requests,
        code=code_of("bundle_archive.py"),
    output:
        bundle=f"results/bundle/{STUDY}.tar.gz",
    log:
        "logs/bundle_archive.log",
    params:
        study=STUDY,
        merged=json.dumps(config, sort_keys=True),
    script:
        "../scripts/bundle_archive.py"
