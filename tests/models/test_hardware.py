"""The bf16-GEMM check reads CPU flags and warns only where bf16 would be converted."""

import pytest

from coevo_jax.models import hardware

ZEN3 = frozenset({"fpu", "avx2", "fma", "avx"})
SAPPHIRE = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16"})


def test_cpu_flags_reads_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512_bf16\n\n")
    assert hardware.cpu_flags.__wrapped__(str(info)) == {"fpu", "avx2", "avx512_bf16"}
    assert hardware.cpu_flags.__wrapped__(str(tmp_path / "missing")) is None
    info.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")
    assert hardware.cpu_flags.__wrapped__(str(info)) == {"fp", "asimd", "bf16"}


@pytest.mark.parametrize(
    "backend, flags, native",
    [
        ("cpu", ZEN3, False),
        ("cpu", SAPPHIRE, True),
        ("cpu", frozenset({"asimd", "bf16"}), True),
        ("gpu", ZEN3, True),
        ("tpu", ZEN3, True),
    ],
)
def test_native_bf16_matmul(backend, flags, native):
    assert hardware.native_bf16_matmul(backend, flags) is native


def test_unknown_flags_count_as_native(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: None)
    assert hardware.native_bf16_matmul("cpu") is True


def test_warning_only_for_bf16_on_a_converting_cpu():
    msg = hardware.matmul_dtype_warning("bfloat16", backend="cpu", flags=ZEN3)
    assert msg and "rl.matmul_dtype=float32" in msg
    assert hardware.matmul_dtype_warning("float32", backend="cpu", flags=ZEN3) is None
    assert hardware.matmul_dtype_warning("bfloat16", backend="cpu", flags=SAPPHIRE) is None
    assert hardware.matmul_dtype_warning("bfloat16", backend="gpu", flags=ZEN3) is None
