"""The measurement core, apart from the server job that owns the server's life: what a cycle is, in which order
its bursts run, when cycles stop (``cycles``), and the per-cycle paired comparisons the stop rule and the summary
share (``paired``)."""
