# Artifacts every server job shares: the base model, the adapters, the request set.


rule model_build:
    input:
        arch=config["model"].get("architecture") or [],
        code=code_of("model_build.py"),
    output:
        weights=directory("results/model/weights"),
        manifest="results/model/manifest.json",
    log:
        "logs/model_build.log",
    benchmark:
        "logs/model_build.bench.tsv"
    params:
        spec=json.dumps(config["model"], sort_keys=True),
    script:
        "../scripts/model_build.py"


rule adapter_build:
    input:
        manifest=rules.model_build.output.manifest,
        code=code_of("adapter_build.py"),
    output:
        weights=directory("results/adapters/{adapter}"),
        manifest="results/adapters/{adapter}.json",
    log:
        "logs/adapter_build/{adapter}.log",
    wildcard_constraints:
        adapter=adapter_names_re(synthetic=True),
    params:
        spec=adapter_params,
    script:
        "../scripts/adapter_build.py"


# An adapter given by path: checked against the built model, copied, described as a synthetic one is.
rule adapter_import:
    input:
        manifest=rules.model_build.output.manifest,
        source=adapter_source_files,
        code=code_of("adapter_import.py"),
    output:
        weights=directory("results/adapters/{adapter}"),
        manifest="results/adapters/{adapter}.json",
    log:
        "logs/adapter_import/{adapter}.log",
    wildcard_constraints:
        adapter=adapter_names_re(synthetic=False),
    params:
        spec=adapter_import_params,
    script:
        "../scripts/adapter_import.py"


rule workload_requests:
    input:
        code=code_of("workload_requests.py"),
        # prompts of a length in tokens (or a dataset's texts) are counted with the model's tokenizer
        model=rules.model_build.output.weights if needs_tokenizer(config) else [],
        datasets=dataset_files(config),
    output:
        requests="results/workload/requests.json",
    log:
        "logs/workload_requests.log",
    params:
        workload=json.dumps(config["workload"], sort_keys=True),
        workloads=json.dumps(config.get("workloads") or {}, sort_keys=True),
        conditions=json.dumps(config["conditions"], sort_keys=True),
        bursts=sorted(config["bursts"]),
        # only where prompts are tokenized is there a check left for build time: elsewhere a server's context
        # edit must not rerun the request set (and with it every server job)
        limits=json.dumps(
            context_limits(config) if needs_tokenizer(config) else {}, sort_keys=True
        ),
    script:
        "../scripts/workload_requests.py"
