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
    wildcard_constraints:
        # a grouped server is measured by its group's job (group_loadtest), never alone
        server=names_re(solo_servers(config)),
    resources:
        # one measuring job per device: the default workflow profile has one of these per device
        lorabench_device=1,
    params:
        job=lambda wc: server_job_params(wc.server),
    script:
        "../scripts/server_loadtest.py"


rule group_loadtest:
    input:
        unpack(group_inputs),
        code=code_of("group_loadtest.py"),
    output:
        group="results/groups/{group}/group.json",
        servers=directory("results/groups/{group}/servers"),
    log:
        "logs/group_loadtest/{group}.log",
    benchmark:
        "logs/group_loadtest/{group}.bench.tsv"
    wildcard_constraints:
        group=names_re(groups_of(config)),
    resources:
        # one job holds every member's server: the device is its own
        lorabench_device=1,
    params:
        group=lambda wc: group_job_params(wc.group),
        files=lambda wc: group_files_params(wc.group),
    script:
        "../scripts/group_loadtest.py"


rule group_member:
    input:
        unpack(member_group_outputs),
    output:
        measurements="results/servers/{server}/measurements.jsonl",
        records="results/servers/{server}/records.jsonl",
        metrics="results/servers/{server}/metrics.jsonl",
        facts="results/servers/{server}/facts.json",
        log="results/servers/{server}/server.log",
    log:
        "logs/group_member/{server}.log",
    wildcard_constraints:
        server=names_re(grouped_servers(config)),
    shell:
        "for f in measurements.jsonl records.jsonl metrics.jsonl facts.json server.log; do"
        " cp {input.servers}/{wildcards.server}/$f results/servers/{wildcards.server}/$f; done 2> {log}"


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
