"""The Timeline -> the checks' results, the recovery episodes, the latency and goodput, the known defects and the failure triage."""
