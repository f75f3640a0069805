"""Load generation: request sets (``workload``) and the streaming client (``client``) with its two load shapes,
one burst (``run_burst``) and bounded concurrency, optionally paced and cut at a duration (``run_concurrency``)."""
