"""The measurement core, apart from the jobs that own the server's life (``session``, ``jobs``): the burst row
(``burst``), the checks on a ready server (``probes``: probes and the canary), the load test's measuring on a
ready server (``measurer``), what a cycle is, in which order its bursts run and when cycles stop (``cycles``),
the per-cycle paired comparisons the stop rule and the summary share (``paired``), rate sweeps (``sweep``) and
their records, capacity at the SLO included (``rate_points``)."""
