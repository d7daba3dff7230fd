"""Flags and environment -> a validated RunSpec -> a Plan: the exact commands, pure."""
