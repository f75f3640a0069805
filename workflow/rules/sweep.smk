# Rate sweeps (rate_sweep in the config): one job per listed server, then capacity at the SLO across them.


rule rate_sweep:
    input:
        unpack(server_inputs),
        code=code_of("rate_sweep.py"),
    output:
        sweep="results/rate_sweep/{server}/sweep.json",
        records="results/rate_sweep/{server}/records.jsonl",
        facts="results/rate_sweep/{server}/facts.json",
        log="results/rate_sweep/{server}/server.log",
    log:
        "logs/rate_sweep/{server}.log",
    benchmark:
        "logs/rate_sweep/{server}.bench.tsv"
    resources:
        lorabench_device=1,
    params:
        job=lambda wc: server_job_params(wc.server),
        kind=lambda wc: kind_params("rate_sweep", wc.server),
    script:
        "../scripts/rate_sweep.py"


rule capacity_summary:
    input:
        sweeps=expand("results/rate_sweep/{server}/sweep.json", server=sweep_servers()),
        code=code_of("capacity_summary.py"),
    output:
        capacity="results/capacity/capacity.json",
        plots=directory("results/capacity/plots"),
    log:
        "logs/capacity_summary.log",
    params:
        servers=json.dumps(config["servers"], sort_keys=True),
        conditions=json.dumps(
            (
                {m: config["conditions"][m] for m in config["rate_sweep"]["mixes"]}
                if sweep_servers()
                else {}
            ),
            sort_keys=True,
        ),
    script:
        "../scripts/capacity_summary.py"


rule sweeps:
    input:
        rules.capacity_summary.output.capacity,
