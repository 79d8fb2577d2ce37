"""The coding agent: one loop (agent/loop/) with four faces: the Textual TUI (agent/tui/), the
prompt-toolkit REPL (repl.py), headless `-p` (headless.py) and `nanocode serve` (serve.py). The
model speaks through a sampler (agent/samplers/) under masks (agent/masks/). The top level holds the
command (cli.py), what the faces share (model.py, settings, sessions, slash commands, display)."""
