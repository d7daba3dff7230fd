"""The fault injector inside every training worker (`python -m harness.nemesis`): stdlib only."""
