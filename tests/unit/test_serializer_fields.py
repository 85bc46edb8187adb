"""Serializer fields built once per class (mlqueue/serializer_fields.py): each serializer still
has fields of its own, whose parent is that serializer, so one spec's validation (its context,
its errors, its values) never shows in another's. No database."""

from mlqueue.api_errors import flatten_errors
from scheduling.spec import GPU_TYPE_REQUIRED, OWNER_NOT_CALLER, JobSpecSerializer

SPEC = {"team": "research-vision", "command": ["python", "train.py"]}


class User:
    """What validate_owner reads of a user."""

    def __init__(self, username: str, email: str = ""):
        self.username, self.email = username, email

    def get_username(self) -> str:
        return self.username


def test_each_serializer_has_its_own_fields_bound_to_it():
    first, second = JobSpecSerializer(data=SPEC), JobSpecSerializer(data=SPEC)
    for name in ("resources", "command", "env", "depends_on", "priority"):
        assert first.fields[name] is not second.fields[name]
        assert first.fields[name].parent is first and second.fields[name].parent is second
        assert first.fields[name].field_name == name
    # A list's and a dict's child, and a nested serializer's own fields, hang from their own copy.
    assert first.fields["command"].child.parent is first.fields["command"]
    assert first.fields["env"].child.parent is first.fields["env"]
    resources = first.fields["resources"]
    assert resources.fields["gpu_count"].parent is resources
    assert resources.fields["gpu_count"] is not second.fields["resources"].fields["gpu_count"]
    assert resources.root is first


def test_the_context_is_each_serializers_own():
    """validate_owner reads the caller from the context: alternating callers, each is judged as itself."""
    rita, victor = User("rita"), User("victor", "victor@example.com")
    for user, owner, ok in [
        (rita, "rita", True),
        (victor, "rita", False),
        (rita, "victor@example.com", False),
        (victor, "victor@example.com", True),
    ]:
        serializer = JobSpecSerializer(data={**SPEC, "owner": owner}, context={"user": user})
        assert serializer.is_valid() is ok, (user.username, owner)
        if not ok:
            assert flatten_errors(serializer.errors) == {"owner": [OWNER_NOT_CALLER.format(owner=owner)]}


def test_one_specs_errors_and_values_stay_its_own():
    bad = JobSpecSerializer(data={**SPEC, "resources": {"gpu_count": 8}})
    good = JobSpecSerializer(data={**SPEC, "resources": {"gpu_count": 16, "gpu_type": "H100"}})
    cpu = JobSpecSerializer(data=SPEC)
    assert not bad.is_valid()
    assert good.is_valid(), good.errors
    assert cpu.is_valid(), cpu.errors
    assert flatten_errors(bad.errors) == {"resources.gpu_type": [GPU_TYPE_REQUIRED.format(gpus=8)]}
    assert good.validated_data["resources"]["tasks"] == 2
    assert cpu.validated_data["resources"] == {
        "gpu_count": 0,
        "gpu_type": "",
        "gpus_per_task": 0,
        "tasks": 1,
        "cpu_per_rank": 1,
        "memory_per_rank_gb": 4,
        "scratch_disk_gb": 0,
    }
