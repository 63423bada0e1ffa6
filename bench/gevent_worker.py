"""A worker command run under gevent: a probe for section 3, not what ships.

    .venv/bin/python -m bench.gevent_worker rq worker -w workers.dispatch.BatchWorker ...

``gevent.monkey.patch_all()`` runs before anything else is imported, then the console
script named first runs unchanged with the rest of the arguments. Its threads, locks,
queues, sockets and sleeps are then gevent's: BatchWorker's slot threads
(workers/inflight.py) and each call's helper thread (workers/deadline.py) are greenlets
of one OS thread. faulthandler's watchdog thread is started in C and stays an OS thread.
The drain compares it with the same command on threads (bench/fulfilment.py, the
``on gevent`` variants).

``fulfilment-worker`` takes no job under it: its supervised child follows its parent in a
thread blocked in ``os.read`` on a pipe (workers/supervise.py ``follow_parent``), which
gevent leaves blocking, so that greenlet holds the process's one thread for good.
"""


def main() -> None:
    from gevent import monkey

    monkey.patch_all()

    import sys
    from importlib.metadata import entry_points

    script = sys.argv[1]
    (entry,) = entry_points(group="console_scripts", name=script)
    sys.argv = [script, *sys.argv[2:]]
    sys.exit(entry.load()())


if __name__ == "__main__":
    main()
