"""The agent process's threads: one per node it runs, until a signal stops them."""

import signal
import threading


def run_until_signalled(agents: list) -> None:
    """Run each agent in a thread until SIGTERM or SIGINT, then stop them and wait for them.
    The handlers only note the signal: the loop stops the agents. Stopping them in the handler
    set their Events, which take a lock; a second signal (INT then TERM, as a shell's cleanup
    sends) ran the handler again inside the first one's set(), waited for the lock that frame
    held, and the agent hung, heartbeating, until SIGKILL."""
    threads = [threading.Thread(target=agent.run, name=agent.name, daemon=True) for agent in agents]
    asked: list[int] = []

    def note(signum, _frame):
        asked.append(signum)

    signal.signal(signal.SIGTERM, note)
    signal.signal(signal.SIGINT, note)
    for thread in threads:
        thread.start()
    stopped = False
    while alive := [thread for thread in threads if thread.is_alive()]:
        if asked and not stopped:
            stopped = True
            for agent in agents:
                agent.stop()
        alive[0].join(timeout=0.2)
