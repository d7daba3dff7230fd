"""The megatron-bridge workload's worker side (harness/workloads/bridge_pretrain.py,
docs/megatron-bridge.md): the command line it reads is the megatron-cpu plan's, every flag of
it understood or refused; the Transformer Engine stand-in reaches only Bridge's one unguarded
importer and never sys.modules; Bridge's install comes first, its libraries after
site-packages. None of this needs Bridge installed."""

from __future__ import annotations

import builtins
import shlex
import sys
import textwrap
from pathlib import Path

import pytest

from harness import cli
from harness.workloads import bridge_pretrain as bp


@pytest.fixture
def megatron_cpu_dir(tmp_path: Path) -> Path:
    """A stand-in of what tools/install-megatron-cpu.sh installs (plans only look at it)."""
    root = tmp_path / "megatron-cpu"
    (root / "megatron" / "training").mkdir(parents=True)
    (root / "nvidia_resiliency_ext").mkdir()
    (root / "sitecustomize.py").write_text("# stand-in\n")
    return root


def workload_argv(capsys, tmp_path: Path, cpu_dir: Path, *extra: str) -> list[str]:
    """The workload's arguments (after the entrypoint) of a printed megatron-cpu plan."""
    status = cli.main(["plan", "--workload", "megatron-cpu", "--megatron-cpu-dir", str(cpu_dir), "--work-dir",
                       str(tmp_path / "work"), "--run-id", "b", "--nvrx-version", "0.7.0", *extra])
    out, err = capsys.readouterr()
    assert status == 0, err
    [line] = [line for line in out.splitlines() if not line.startswith("#")]
    return shlex.split(line.split(" -- ", 1)[1])[1:]


@pytest.mark.parametrize("distributed", ["0", "1"])
def test_the_megatron_cpu_command_line_is_read_whole(distributed, tmp_path, megatron_cpu_dir, clean_spec_env, capsys):
    argv = workload_argv(capsys, tmp_path, megatron_cpu_dir, "--distributed-optimizer", distributed,
                         "--seq-length", "64")
    t, notes = bp.parse(argv)
    ckpt = str(tmp_path / "work" / "runs" / "b" / "checkpoints")
    assert (t.save, t.load, t.save_interval, t.train_iters) == (ckpt, ckpt, 4, 12)
    assert (t.num_layers, t.hidden_size, t.num_attention_heads, t.seq_length) == (2, 64, 4, 64)
    assert (t.micro_batch_size, t.global_batch_size, t.vocab_size) == (1, 2, 256)
    assert t.use_distributed_optimizer is (distributed == "1")
    assert t.async_save and t.enable_ft_package and t.bf16 and t.ckpt_format == "torch_dist"
    assert (t.distributed_backend, t.num_workers, t.hidden_dropout, t.attention_dropout) == ("gloo", 0, 0.0, 0.0)
    assert t.transformer_impl == "local"
    assert not (t.persist_layer_norm or t.masked_softmax_fusion or t.bias_dropout_fusion
                or t.bias_activation_fusion or t.gradient_accumulation_fusion)
    assert [n.split(":", 1)[0] for n in notes] == list(bp.NOT_BRIDGE_SETTINGS)


def test_a_flag_bridge_is_not_told_about_is_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        bp.parse(["--save", "/c", "--train-iters", "12", "--global-batch-size", "2", "--no-load-optim"])
    assert stop.value.code == 2
    assert "--no-load-optim" in capsys.readouterr().err


def test_defaults_are_megatron_lm_s_where_the_command_line_is_silent():
    t, notes = bp.parse(["--save", "/c", "--train-iters", "12", "--global-batch-size", "2"])
    assert notes == []
    assert t.load is None and not t.async_save and not t.use_distributed_optimizer and not t.enable_ft_package
    assert (t.hidden_dropout, t.transformer_impl, t.distributed_backend) == (0.1, "transformer_engine", "nccl")


# ---------------------------------------------------------------- the Transformer Engine stand-in


@pytest.fixture
def fake_modules(tmp_path: Path, monkeypatch):
    """`pkg_bridge_te.unguarded` imports TE as Bridge's lora_layers does; `pkg_bridge_te.guarded`
    as megatron.core does (try/except ImportError)."""
    pkg = tmp_path / "pkg_bridge_te"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "unguarded.py").write_text(textwrap.dedent("""\
        import transformer_engine.pytorch as te

        def annotated() -> te.ops.Sequential:
            return None
        """))
    (pkg / "guarded.py").write_text(textwrap.dedent("""\
        try:
            import transformer_engine  # noqa: F401
            HAVE_TE = True
        except ImportError:
            HAVE_TE = False
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [n for n in sys.modules if n.startswith(("pkg_bridge_te", "transformer_engine"))]:
        del sys.modules[name]


def test_only_the_named_importer_gets_the_stand_in(fake_modules, monkeypatch):
    if "transformer_engine" in sys.modules or _importable("transformer_engine"):
        pytest.skip("a real Transformer Engine is importable here")
    stand_in = bp.TeStandIn(frozenset({"pkg_bridge_te.unguarded"}))
    monkeypatch.setattr(builtins, "__import__", stand_in)
    import pkg_bridge_te.guarded as guarded
    import pkg_bridge_te.unguarded as unguarded

    assert guarded.HAVE_TE is False  # megatron.core's guards still see no TE
    assert isinstance(unguarded.te, bp.Absent) and "transformer_engine" not in sys.modules
    assert stand_in.served == ["pkg_bridge_te.unguarded"]
    with pytest.raises(RuntimeError, match="Transformer Engine is not installed"):
        unguarded.te.Linear(4, 4)


def test_without_the_stand_in_bridge_s_unguarded_import_fails(fake_modules):
    if _importable("transformer_engine"):
        pytest.skip("a real Transformer Engine is importable here")
    with pytest.raises(ModuleNotFoundError, match="transformer_engine"):
        import pkg_bridge_te.unguarded  # noqa: F401


def test_a_real_transformer_engine_is_left_alone(fake_modules, tmp_path, monkeypatch):
    real = tmp_path / "transformer_engine"
    (real / "pytorch").mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = True\n")
    (real / "pytorch" / "__init__.py").write_text("REAL = True\nclass ops:\n    Sequential = object\n")
    stand_in = bp.TeStandIn(frozenset({"pkg_bridge_te.unguarded"}))
    monkeypatch.setattr(builtins, "__import__", stand_in)
    import pkg_bridge_te.unguarded as unguarded

    assert getattr(unguarded.te, "REAL", False) is True and stand_in.served == []


def test_install_and_uninstall_restore_the_import():
    before = builtins.__import__
    stand_in = bp.TeStandIn().install()
    try:
        assert builtins.__import__ is stand_in
    finally:
        stand_in.uninstall()
    assert builtins.__import__ is before


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


# ---------------------------------------------------------------- where Bridge comes from


def test_bridge_first_its_libraries_after_site_packages(tmp_path):
    path = ["/script", "/usr/lib/site-packages"]
    bp.add_to_path(tmp_path, path)
    bp.add_to_path(tmp_path, path)  # twice: no duplicates
    assert path == [str(tmp_path), "/script", "/usr/lib/site-packages", str(tmp_path / "site")]


def test_the_install_dir_is_the_environment_s_else_the_checkout_s(tmp_path):
    assert bp.bridge_dir({bp.DIR_ENV: str(tmp_path)}) == tmp_path
    assert bp.bridge_dir({}) == Path(bp.__file__).resolve().parents[2] / ".megatron-bridge"


def test_importing_the_module_imports_neither_torch_nor_bridge():
    import subprocess

    code = ("import sys; import harness.workloads.bridge_pretrain; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron', 'transformer_engine')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(bp.__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"
