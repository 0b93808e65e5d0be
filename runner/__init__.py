"""Running a DeepSpeed job: build the command, preflight, start, watch, stop, and judge the exit."""
