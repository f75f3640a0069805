# Measurements: one job per server configuration and job kind (lorabench.jobs) owns the server's whole life.


rule server_loadtest:
    input:
        unpack(server_inputs),
        code=code_of("server_loadtest.py"),
    output:
        measurements="results/servers/{server}/measurements.jsonl",
        records="results/servers/{server}/records.jsonl",
        metrics="results/servers/{server}/metrics.jsonl",
        facts="results/servers/{server}/facts.json",
        log="results/servers/{server}/server.log",
    log:
        "logs/server_loadtest/{server}.log",
    benchmark:
        "logs/server_loadtest/{server}.bench.tsv"
    resources:
        # one measuring job per device: the default workflow profile has one of these per device
        lorabench_device=1,
    params:
        job=lambda wc: server_job_params(wc.server),
    script:
        "../scripts/server_loadtest.py"


rule runtime_load:
    input:
        unpack(server_inputs),
        code=code_of("runtime_load.py"),
    output:
        load="results/runtime_load/{server}/load.json",
        records="results/runtime_load/{server}/records.jsonl",
        log="results/runtime_load/{server}/server.log",
    log:
        "logs/runtime_load/{server}.log",
    resources:
        lorabench_device=1,
    params:
        job=lambda wc: server_job_params(wc.server, runtime=True),
        kind=lambda wc: kind_params("runtime_load", wc.server),
    script:
        "../scripts/runtime_load.py"


rule prefix_cache:
    input:
        unpack(server_inputs),
        code=code_of("prefix_cache.py"),
    output:
        prefix="results/prefix_cache/{server}/prefix.json",
        records="results/prefix_cache/{server}/records.jsonl",
        log="results/prefix_cache/{server}/server.log",
    log:
        "logs/prefix_cache/{server}.log",
    resources:
        lorabench_device=1,
    params:
        job=lambda wc: server_job_params(wc.server, prefix=True),
        kind=lambda wc: kind_params("prefix_cache", wc.server),
    script:
        "../scripts/prefix_cache.py"
