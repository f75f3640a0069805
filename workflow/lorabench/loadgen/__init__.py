"""Load generation: request sets (``workload``), the streaming client (``client``) and load shapes (``shapes``)."""
