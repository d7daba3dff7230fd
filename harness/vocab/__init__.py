"""The words every part speaks: the fault vocabulary, the typed events, the verdict, the run directory's layout, the log grammar, the parallel layout, the checkpoint tiers, exit statuses."""
