"""What this machine has and does: free ports, GPUs, installed launchers, Slurm, tmpfs mounts."""
