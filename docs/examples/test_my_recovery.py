"""A recovery test of your own, with nvrx-qual installed (docs/testing.md, "The pytest plugin in
your own repository"): copy it into your repository's tests and run `pytest`. No conftest.py is
needed; the suite runs this file as it is (recovery_tests/test_user_repository.py).

`qual_run("kill")` launches the reference workload under the newest NVRx launcher found (as
`nvrx-qual run` picks it), kills a rank after a checkpoint, and judges the recovery with every
criterion; the loss and the end state are compared with an uninterrupted run of the same
configuration, reused from the work directory (--work-dir) when one qualified there, else run
first. Its run directory stays under the work directory for inspection.
"""

from pytest_nvrx_qual.runs import explain


def test_a_killed_rank_recovers(qual_run):
    outcome = qual_run("kill", name="my-recovery-kill")
    assert outcome.verdict.qualified, explain(outcome)
    # Each criterion can be asked by name (docs/criteria.md): the end state matches the
    # uninterrupted run's, tensor by tensor.
    assert outcome.verdict.criterion("state_equivalence").status == "pass", explain(outcome, "state_equivalence")
