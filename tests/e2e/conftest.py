"""Fixtures the end-to-end tests share."""

from tests.e2e.images import podman_image  # noqa: F401 (a fixture: the podman tests' image)
