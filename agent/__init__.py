"""The coding agent: one loop (agent/loop) with three faces: Textual TUI, prompt-toolkit REPL, headless."""
