"""The free memory a run may plan with: the machine's, within the control group's limit (a
container's), which psutil's 'available' does not see."""

from __future__ import annotations

import types

import psutil
import pytest

from attndesk.errors import ConfigError
from attndesk.runs.config import AttentionConfig
from attndesk.system import free_memory
from attndesk.system.free_memory import cgroup_headroom

GIB = 2**30


def _group(folder, limit: str, usage: int, inactive: int = 0, v1: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    names = (
        ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        if v1
        else (
            "memory.max",
            "memory.current",
            "inactive_file",
        )
    )
    (folder / names[0]).write_text(f"{limit}\n")
    (folder / names[1]).write_text(f"{usage}\n")
    (folder / "memory.stat").write_text(f"anon {usage - inactive}\nfile {inactive}\n{names[2]} {inactive}\n")


def test_a_v2_limit_leaves_its_headroom_less_the_reclaimable_cache(tmp_path):
    _group(tmp_path / "box" / "app", "max", 3 * GIB, inactive=GIB)
    assert cgroup_headroom(tmp_path, "0::/box/app\n") is None
    _group(tmp_path / "box" / "app", str(4 * GIB), 3 * GIB, inactive=GIB)
    assert cgroup_headroom(tmp_path, "0::/box/app\n") == 2 * GIB


def test_the_tightest_group_above_the_process_bounds_it(tmp_path):
    # the parent's limit covers its other children's memory too
    _group(tmp_path / "box", str(6 * GIB), 5 * GIB)
    _group(tmp_path / "box" / "app", str(4 * GIB), 3 * GIB // 2)
    assert cgroup_headroom(tmp_path, "0::/box/app\n") == GIB


def test_a_v1_memory_hierarchy_and_a_containers_own_root(tmp_path):
    _group(tmp_path / "memory" / "docker" / "abc", str(2 * GIB), GIB // 2, v1=True)
    membership = "12:pids:/docker/abc\n4:memory:/docker/abc\n0::/docker/abc\n"
    assert cgroup_headroom(tmp_path, membership) == 3 * GIB // 2
    # v1 writes "no limit" as a huge number
    _group(tmp_path / "memory" / "docker" / "abc", str(2**63 - 4096), GIB // 2, v1=True)
    assert cgroup_headroom(tmp_path, membership) is None
    # inside the container's namespace its group is the mount's root
    inside = tmp_path / "ns"
    _group(inside, str(GIB), GIB // 4)
    assert cgroup_headroom(inside, "0::/\n") == 3 * GIB // 4


def test_no_control_group_information_means_no_limit(tmp_path):
    assert cgroup_headroom(tmp_path, "") is None
    assert cgroup_headroom(tmp_path, "0::/missing\n") is None


def test_a_containers_limit_refuses_a_table_the_host_could_hold(monkeypatch, tmp_path):
    """The host reports 20 GiB available, the container allows 1 GiB more: a 7.6 GiB embedding
    table is refused before it is allocated, saying what fits."""
    monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(available=20 * GIB))
    _group(tmp_path / "box", str(2 * GIB), GIB)
    monkeypatch.setattr(free_memory, "cgroup_headroom", lambda: cgroup_headroom(tmp_path, "0::/box\n"))
    assert free_memory.available_memory() == GIB
    config = AttentionConfig(vocab_size=32_000_000, memory_budget=2**40)
    with pytest.raises(
        ConfigError, match=r"needs 7\.6 GiB for the embedding table; at most [\d,]+ fits in the 1\.0 GiB of free memory"
    ):
        config.validate()
