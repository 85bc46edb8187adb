"""The web surface of scheduling: the jobs API, the pages, the submit form, the queue and the live
views. It reads the scheduler's state from the database, never from the leader's process."""
