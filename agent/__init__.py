"""The coding agent: one loop (agent/driver.py) with three faces: Textual TUI, prompt-toolkit REPL, headless."""
