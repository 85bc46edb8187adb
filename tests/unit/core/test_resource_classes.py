"""A resource class's name and the GPU type it names, both ways."""

import pytest

from scheduling.core.model import CPU_CLASS, gpu_type_of, resource_class


@pytest.mark.parametrize("gpu_type, name", [("H100", "gpu:H100"), ("L40S", "gpu:L40S"), (None, "cpu"), ("", "cpu")])
def test_a_class_is_named_for_its_gpu_type_or_cpu(gpu_type, name):
    assert resource_class(gpu_type) == name
    assert gpu_type_of(name) == (gpu_type or None)


def test_cpu_names_no_gpu_type():
    assert gpu_type_of(CPU_CLASS) is None
