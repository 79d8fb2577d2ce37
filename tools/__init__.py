"""Agent tools (Read, Edit, Grep, Bash) with permissions, the workspace guard and snapshots/undo."""
