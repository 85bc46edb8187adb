"""What an agent reports about its machine."""

import json

import pytest

from agents.node.machine import gpu_type_from_name, inventory
from agents.node.options import nodes_from, parse_args


@pytest.mark.parametrize(
    "name, kind",
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla T4", "T4"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-ADA"),
    ],
)
def test_gpu_model_names_map_to_resource_classes(name, kind):
    assert gpu_type_from_name(name) == kind


def test_fake_gpus_need_no_nvml():
    found = inventory(
        name="n1",
        zone="z1",
        rack="r1",
        fake_gpus=8,
        gpu_type="A100",
        cpus=32,
        memory=256,
        labels={},
        address="10.0.0.2",
    )
    assert (found["gpu_type"], found["gpu_count"], found["cpu_count"], found["memory_gb"]) == ("A100", 8, 32, 256)
    cpu_only = inventory(
        name="n2", zone="z1", rack="r1", fake_gpus=0, gpu_type=None, cpus=None, memory=None, labels={}, address=None
    )
    assert (cpu_only["gpu_type"], cpu_only["gpu_count"]) == ("", 0) and cpu_only["cpu_count"] >= 1
    assert "scratch_disk_gb" not in cpu_only  # not reported: the server does not check it


def test_scratch_disk_is_reported_when_given():
    found = inventory(
        name="n1",
        zone="z1",
        rack="r1",
        fake_gpus=8,
        gpu_type=None,
        cpus=8,
        memory=64,
        labels={},
        address=None,
        scratch=7500,
    )
    assert found["scratch_disk_gb"] == 7500


@pytest.mark.parametrize(
    "more, runs",
    [((), False), (("--container-hook", "apptainer exec docker://{image}"), True)],
    ids=["no runtime", "a hook"],
)
def test_the_agent_reports_whether_it_runs_images_for_its_node_and_every_node_of_its_fleet(tmp_path, more, runs):
    base = ["--server", "http://x", "--workdir", str(tmp_path), "--isolation", "none", *more]
    (node,) = nodes_from(parse_args([*base, "--node-name", "n1", "--fake-gpus", "8"]))
    assert node["runs_images"] is runs
    fleet = tmp_path / "fleet.json"
    node = {"name": "v1", "zone": "z1", "rack": "r1", "cpu_count": 8, "memory_gb": 16}
    fleet.write_text(json.dumps([node, {**node, "name": "v2", "runs_images": not runs}]))
    assert [n["runs_images"] for n in nodes_from(parse_args([*base, "--fleet", str(fleet)]))] == [runs, runs]
