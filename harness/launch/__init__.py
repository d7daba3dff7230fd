"""Real processes: the run directory prepared, the job launched and watched, the baseline found or run, repeats."""
