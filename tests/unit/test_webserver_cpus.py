"""The web tier's default worker count: the CPUs the process may use, its cgroup's quota included."""

from mlqueue.webserver import cgroup_cpu_quota, usable_cpus


def write(path, text):
    path.write_text(text)
    return str(path)


def test_cgroup_v2_quota_is_read(tmp_path):
    assert cgroup_cpu_quota(write(tmp_path / "cpu.max", "250000 100000\n"), str(tmp_path)) == 2.5
    assert cgroup_cpu_quota(write(tmp_path / "cpu.max", "max 100000\n"), str(tmp_path)) is None


def test_cgroup_v1_quota_is_read_when_there_is_no_v2_file(tmp_path):
    write(tmp_path / "cpu.cfs_quota_us", "150000\n")
    write(tmp_path / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_quota(str(tmp_path / "absent"), str(tmp_path)) == 1.5
    write(tmp_path / "cpu.cfs_quota_us", "-1\n")
    assert cgroup_cpu_quota(str(tmp_path / "absent"), str(tmp_path)) is None


def test_no_cgroup_files_is_no_quota(tmp_path):
    assert cgroup_cpu_quota(str(tmp_path / "absent"), str(tmp_path / "absent")) is None


def test_a_quota_bounds_the_affinity_rounded_up():
    # A 128-core host, a container limited to 2 CPUs: 2 workers, not 128.
    assert usable_cpus(quota=2.0, affinity=128) == 2
    assert usable_cpus(quota=2.5, affinity=128) == 3
    assert usable_cpus(quota=0.5, affinity=128) == 1
    assert usable_cpus(quota=16.0, affinity=4) == 4  # affinity is the smaller
