"""The run history: what every launched or watched run measured next to what the planner predicted.

``record`` holds the facts, ``store`` the SQLite file, ``calibrate`` turns matching runs into corrections.
"""
