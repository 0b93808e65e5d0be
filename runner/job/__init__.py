"""Running one launch: the launchers in their own sessions, the threads that watch them, the stop escalation and
the verdict at the end.

prepare     the launched copies of the configs and the commands (the run directory before the start)
session     the job's processes by session id: start a launcher in a new session, signal or list them all
stopping    the stop as a state machine: SIGINT, SIGTERM after a grace, SIGKILL after another
watchers    the threads: one reader per launcher pipe, the rank death watch; a rank process's global rank
supervisor  ``Job``: starts, follows the output, stops on request, decides the verdict when nothing is left
sink        what a job tells whoever shows it (``JobSink``) and hands back at the end (``RunOutcome``)
terminal    ``TerminalSink``: the job in a terminal (streamed log, status lines, the verdict)
"""
