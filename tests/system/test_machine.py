"""The machine fingerprint: what it reads from /proc/cpuinfo and torch, and how two differ."""

from __future__ import annotations

import torch

from attndesk.system import machine
from attndesk.system.machine import KERNEL_ENV, fingerprint_differences, machine_fingerprint

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9654 96-Core Processor
stepping\t: 1
flags\t\t: fpu avx2 avx512f

processor\t: 1
vendor_id\t: SomethingElse
model name\t: not the first processor
"""


def test_the_first_processor_of_cpuinfo_is_read(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    fields = machine._cpuinfo(path)
    assert fields["vendor_id"] == "AuthenticAMD" and fields["model name"] == "AMD EPYC 9654 96-Core Processor"
    assert (fields["cpu family"], fields["model"], fields["stepping"]) == ("25", "17", "1")
    assert machine._cpuinfo(tmp_path / "missing") == {}


def test_the_fingerprint_reads_torch_and_the_processor(monkeypatch, tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    read = machine._cpuinfo
    monkeypatch.setattr(machine, "_cpuinfo", lambda: read(path))
    for name in KERNEL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    got = machine_fingerprint(3)
    assert got["vendor"] == "AuthenticAMD" and got["processor"] == "AMD EPYC 9654 96-Core Processor"
    assert got["cpu_id"] == "family 25 model 17 stepping 1"
    assert got["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert got["torch"] == torch.__version__ and got["threads"] == 3
    assert got["kernel_env"] == {"MKL_CBWR": "COMPATIBLE"}
    built = torch.__config__.show()
    assert (got["mkl"] != "") == torch.backends.mkl.is_available() and got["mkl"] in built
    assert (got["onednn"] != "") == torch.backends.mkldnn.is_available() and f"v{got['onednn']}" in built
    assert machine_fingerprint()["threads"] == torch.get_num_threads()


def test_differences_name_each_field_with_both_values():
    here = machine_fingerprint(1)
    assert fingerprint_differences(dict(here), here) == []
    capability = "DEFAULT" if here["cpu_capability"] != "DEFAULT" else "AVX2"  # another than here's
    other = here | {"cpu_capability": capability, "threads": 2, "kernel_env": {"MKL_CBWR": "AVX2"}}
    assert fingerprint_differences(other, here) == [
        f"cpu_capability: {capability} recorded, {here['cpu_capability']} here",
        f"kernel_env: {{'MKL_CBWR': 'AVX2'}} recorded, {here['kernel_env']} here",
        "threads: 2 recorded, 1 here",
    ]
    assert fingerprint_differences(None, here) == ["no machine fingerprint recorded"]
    assert fingerprint_differences({k: v for k, v in here.items() if k != "onednn"}, here) == [
        f"onednn: nothing recorded, {here['onednn']} here"
    ]
