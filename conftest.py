"""Thin root conftest: the suite's options, markers and fixtures live in the fixtures/ plugin, which is
built on nvrx-qual's installable pytest plugin, pytest_nvrx_qual (it names it in its own
pytest_plugins, under the entry point's name: registered once where nvrx-qual is installed)."""

import os

import pytest

pytest_plugins = ["fixtures.plugin"]


@pytest.hookimpl(trylast=True)  # after pytest made its temporary path factory
def pytest_configure(config: pytest.Config) -> None:
    """torch makes its inductor cache (an empty torchinductor_<user>/ when nothing compiles) in
    the temporary directory as soon as Megatron imports torch._inductor, in the tests and in
    their subprocesses: it goes into this session's base temporary directory instead, which
    pytest removes when every test passed (docs/contracts.md, "Temporary files")."""
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(config._tmp_path_factory.getbasetemp() / "torchinductor")
