"""A run directory -> one read: the Timeline of typed events, the optimizer's record, the end state, the evidence digest."""
