"""A job shape's derived figures (class, units, the memo key) are computed once, when it is
made: they must follow every way a shape is made, changed and copied."""

import pickle
from dataclasses import replace

from scheduling.core.model import JobShape, Topology


def gang(**changes) -> JobShape:
    shape = JobShape("H100", 4, 8, 16, 256, {"pool": "a", "fabric": "ib"}, Topology.PREFER_SAME_RACK)
    return replace(shape, **changes)


def test_a_gpu_shape_counts_gpus_and_names_its_class():
    shape = gang()
    assert (shape.resource_class, shape.units_per_task, shape.units) == ("gpu:H100", 8, 32)


def test_a_cpu_shape_counts_cpus():
    shape = JobShape(None, 3, 0, 16, 64)
    assert (shape.resource_class, shape.units_per_task, shape.units) == ("cpu", 16, 48)


def test_a_changed_shape_derives_its_figures_again():
    shape = replace(gang(), gpu_type="A100", tasks=2, gpus_per_task=4, node_selector={"pool": "b"})
    assert (shape.resource_class, shape.units_per_task, shape.units) == ("gpu:A100", 4, 8)
    assert shape.key() == ("A100", 4, 16, 256, (("pool", "b"),), Topology.PREFER_SAME_RACK, 0, False)


def test_the_key_leaves_out_the_tasks_and_sorts_the_selector():
    assert gang(tasks=1).key() == gang(tasks=9).key()
    assert gang().key() == ("H100", 8, 16, 256, (("fabric", "ib"), ("pool", "a")), Topology.PREFER_SAME_RACK, 0, False)


def test_a_job_naming_an_image_is_another_shape():
    """A gang that failed to fit on nodes that run images says nothing of one without an image."""
    assert gang(image=True) != gang() and gang(image=True).key() != gang().key()
    assert gang(image=True).key()[:-1] == gang().key()[:-1]


def test_derived_figures_do_not_count_in_equality_or_the_text():
    assert gang() == gang()
    assert "units" not in repr(gang()) and "_key" not in repr(gang())


def test_a_shape_sent_to_a_child_process_keeps_its_figures():
    copy = pickle.loads(pickle.dumps(gang()))
    assert copy == gang()
    assert (copy.resource_class, copy.units, copy.key()) == ("gpu:H100", 32, gang().key())
