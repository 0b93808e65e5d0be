"""Dashboard panels: each renders one part of the latest Snapshot and holds no other state."""
