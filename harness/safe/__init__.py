"""Safe access to files a stranger may have written: no link followed, no FIFO or device read, bounded reads, atomic writes, the one restricted unpickler."""
