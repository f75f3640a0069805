# Engine environments: one isolated venv per engine and version (or an existing installation).


rule engine_env:
    input:
        requirements=env_inputs,
        code=code_of("engine_env.py"),
    output:
        info="results/envs/{engine}.json",
        freeze="results/envs/{engine}.freeze.txt",
    log:
        "logs/engine_env/{engine}.log",
    benchmark:
        "logs/engine_env/{engine}.bench.tsv"
    params:
        spec=env_params,
    script:
        "../scripts/engine_env.py"
