"""Running one launch: the launchers in their own sessions, the threads that watch them, the stop escalation and
the verdict at the end. ``supervisor.Job`` ties them together; ``terminal.TerminalSink`` prints it."""
