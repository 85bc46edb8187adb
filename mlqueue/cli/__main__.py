"""`python -m mlqueue.cli`, as `mlq`."""

from mlqueue.cli import main

main()
